"""Bring-up overhead and SSH connections per bring-up: pdtui headless vs the reference loop.

The reference deployment (sim prefill + sim decode + the default real router) is
brought up by pdtui (the engine as ``pdtui up --headless`` drives it) over the
local host and over loopback SSH, and by the 20 s polling loop pdtui replaces (a fresh ``ssh`` per
command, real ``sleep``s: 20 s polls and its ``sleep 8``) over the same sshd.

overhead = wall time of the bring-up - the backends' own startup, where the
backends' own startup is the longest "Started" -> ready line span in the
journal. Starting the router and waiting for it counts as overhead for both.
A second figure, overhead_less_router_own, also subtracts the router's own
start-up: from its "Started" line to the line in which it activates its last
worker (after which its /readiness answers 200), read from the journal too.
Connections are counted at sshd: its ``Accepted publickey`` lines.

The floor (``floor_ssh``, each run beside one of pdtui's): the same remote work
with no engine, back to back over one SSH connection: the preflight's reads in
one command, the backends' start, their journal followed until both ready
lines, the router's start, its ``/readiness`` asked every 10 ms until 200, its
model and one smoke generation of the same prompt. What it takes beyond the
services' own start-up is sshd's session and the login shell per command, the
stand-ins' Python ``systemctl`` and ``journalctl``, the stand-in supervisor's
start before systemd's "Started" line, and the servers' generation: none of
it pdtui's. ``beyond_floor`` is pdtui's overhead less the floor's (medians).
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    READY_LINE,
    Stamps,
    deployment,
    emit,
    local_host,
    machine,
    parse_args,
    router_argv,
    summary,
    worker_argv,
)
from bench._journal import entries, own_startup, router_own_startup  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from pdtui.engine.checks.generation import SMOKE_PROMPT, request_body  # noqa: E402
from pdtui.engine.events import StateChanged  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.engine.states import ServiceState  # noqa: E402
from pdtui.fabric.sysfs import fabric_argv  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.hosts.http import HttpProber  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402
from pdtui.targets.systemd.commands import Commands  # noqa: E402
from pdtui.targets.systemd.journal_json import parse_entry  # noqa: E402

LOOP = """set -u
ssh_() {{ {ssh} "$@"; }}
ssh_ '{systemctl} start {prefill} && {systemctl} start {decode}'
for i in $(seq 1 18); do sleep {sleep}
  rp=$(timeout 10 {ssh} '{journalctl} -u {prefill} --no-pager | grep -c "{ready}"')
  rd=$(timeout 10 {ssh} '{journalctl} -u {decode} --no-pager | grep -c "{ready}"')
  [ "${{rp:-0}}" -ge 1 ] && [ "${{rd:-0}}" -ge 1 ] && break
done
ssh_ '{systemctl} enable --now {router}; sleep {settle}; {systemctl} is-active {router}; ss -tlnp | grep :{port}'
"""


class Reference:
    """One fresh copy of the reference units in the sandbox (fresh names and ports per run)."""

    def __init__(self, sandbox: Sandbox, index: int, startup: float) -> None:
        p, d, r, boot = (free_port() for _ in range(4))
        self.port = r
        self.units = {
            "prefill": sandbox.add_unit(f"bench-p{index}", worker_argv("prefill", p, bootstrap=boot, startup=startup * 0.8)),
            "decode": sandbox.add_unit(f"bench-d{index}", worker_argv("decode", d, bootstrap=boot, startup=startup)),
            "router": sandbox.add_unit(f"bench-r{index}", router_argv(r, [(p, boot)], [d])),
        }
        self.ports = {"prefill": p, "decode": d, "router": r}

    def config(self, host: dict) -> dict:
        services = {name: {"host": "h", "unit": unit, "role": name, "port": self.ports[name], "timeout": "90s"}
                    for name, unit in self.units.items()}
        return {"name": "bench-bringup", "hosts": {"h": host}, "services": services}

    def router(self, sandbox: Sandbox) -> tuple[float, float]:
        """(started, all workers activated) epoch seconds of the router."""
        return router_own_startup(sandbox, self.units["router"], workers=2)

    def backends(self, sandbox: Sandbox) -> list[tuple[float, float]]:
        """(started, ready) epoch seconds of prefill and decode."""
        journal = entries(sandbox)
        return [own_startup(sandbox, self.units[n], journal) for n in ("prefill", "decode")]

    def backends_own(self, sandbox: Sandbox) -> float:
        return max(ready - started for started, ready in self.backends(sandbox))


async def pdtui_run(sandbox: Sandbox, ref: Reference, host: dict) -> dict:
    """One headless bring-up; its wall time, overhead and where the overhead went (seconds)."""
    stamps = Stamps()
    orchestrator = Orchestrator(deployment(ref.config(host), sandbox.root), Registry(make_host))
    orchestrator.subscribe(stamps)
    t0 = time.time()
    try:
        done = await orchestrator.run()
        end = time.time()
    finally:
        await orchestrator.close()
    if not done.ok:
        raise RuntimeError(f"pdtui bring-up failed: {done.failures}")
    router_start, _ = stamps.first(lambda e: isinstance(e, StateChanged) and e.service == "router"
                                   and e.new is ServiceState.STARTING)
    spans = ref.backends(sandbox)
    own = max(ready - started for started, ready in spans)
    router_started, router_ready = ref.router(sandbox)
    router_own = router_ready - router_started
    return {"wall": end - t0, "own": own, "overhead": end - t0 - own,
            "router_own": router_own, "overhead_less_router_own": end - t0 - own - router_own,
            "until_first_unit_started": min(started for started, _ in spans) - t0,
            "last_ready_line_to_router_start": router_start - max(ready for _, ready in spans),
            "router_phase": end - router_start}


async def floor_run(sandbox: Sandbox, ref: Reference, host: dict) -> dict:
    """The same remote work as pdtui's bring-up with no engine (see the module's docstring); its overhead."""
    config = deployment(ref.config(host), sandbox.root).hosts["h"]
    commands = Commands.for_host(config)
    units = list(ref.units.values())
    backends = [ref.units["prefill"], ref.units["decode"]]
    t0 = time.time()
    ssh = make_host(config)
    prober = HttpProber(ssh)
    try:
        reads = [commands.show(units), commands.cat(units), commands.last_entry(), fabric_argv(config.sysfs or "/sys")]
        await ssh.run(["sh", "-c", "; ".join(shlex.join(argv) for argv in reads)])
        await ssh.run(commands.start_and_show(backends))
        async with ssh.stream(commands.follow(backends, recent=30)) as lines:
            ready: set[str] = set()
            async for line in lines:
                entry = parse_entry(line)
                if entry is not None and READY_LINE in entry.message:
                    ready.add(entry.source or "")
                    if ready >= set(backends):
                        break
        await ssh.run(commands.start_and_show([ref.units["router"]]))
        while not (await prober.get(ref.port, "/readiness")).ok:
            await asyncio.sleep(0.01)
        models = (await prober.get(ref.port, "/v1/models")).json()
        answer = await prober.request("POST", ref.port, "/v1/chat/completions",
                                      body=request_body(models["data"][0]["id"], SMOKE_PROMPT), timeout=30)
        end = time.time()
    finally:
        await prober.close()
        await ssh.close()
    if not answer.ok:
        raise RuntimeError(f"the floor's smoke failed: {answer.describe()}")
    own = ref.backends_own(sandbox)
    router_started, router_ready = ref.router(sandbox)
    return {"wall": end - t0, "own": own, "overhead": end - t0 - own,
            "overhead_less_router_own": end - t0 - own - (router_ready - router_started)}


def loop_run(pool: SshdPool, server, sandbox: Sandbox, ref: Reference, sleep: float, settle: float) -> dict:
    ssh = " ".join(pool.ssh(server, "")[:-1])
    script = LOOP.format(ssh=ssh, systemctl=sandbox.bin_dir / "systemctl", journalctl=sandbox.bin_dir / "journalctl",
                         ready=READY_LINE, sleep=sleep, settle=settle, port=ref.port, **ref.units)
    t0 = time.monotonic()
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    if "active" not in out.stdout or f":{ref.port}" not in out.stdout:
        raise RuntimeError(f"loop did not see the router up: {out.stdout!r} {out.stderr!r}")
    own = ref.backends_own(sandbox)
    return {"wall": wall, "own": own, "overhead": wall - own}


def connections(server, action) -> tuple[int, object]:
    before = server.accepted_connections()
    result = action()
    return server.accepted_connections() - before, result


def figures_of(runs: list[dict], conns: list[int] | None = None) -> dict:
    figures = {key: summary([r[key] for r in runs], 1, 3) for key in runs[0]}
    if conns is not None:
        figures["connections"] = conns
    return figures


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    runs, loop_runs, startup = (1, 1, 0.5) if args.quick else (5, 2, 3.0)
    sleeps = {"loop_20s": (1.0, 3.0), "loop_5s": (0.5, 3.0)} if args.quick else {"loop_20s": (20, 8), "loop_5s": (5, 8)}
    info = machine()
    pool = SshdPool()
    sandbox = Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-sim-")))
    index = 0

    def fresh() -> Reference:
        nonlocal index
        index += 1
        return Reference(sandbox, index, startup)

    try:
        server = pool.start()
        local = []
        for _ in range(runs):
            local.append(asyncio.run(pdtui_run(sandbox, fresh(), local_host(sandbox))))
            sandbox.stop_all()
        ssh, ssh_conns, floor = [], [], []
        for _ in range(runs):
            ref = fresh()
            count, result = connections(server, lambda ref=ref: asyncio.run(pdtui_run(sandbox, ref, pool.host(server, sandbox))))
            ssh.append(result)
            ssh_conns.append(count)
            sandbox.stop_all()
            floor.append(asyncio.run(floor_run(sandbox, fresh(), pool.host(server, sandbox))))
            sandbox.stop_all()
        loops = {}
        for name, (sleep, settle) in sleeps.items():
            results, conns = [], []
            for _ in range(loop_runs):
                ref = fresh()
                def one(ref=ref, sleep=sleep, settle=settle):
                    return loop_run(pool, server, sandbox, ref, sleep, settle)
                count, result = connections(server, one)
                results.append(result)
                conns.append(count)
                sandbox.stop_all()
            loops[name] = figures_of(results, conns) | {"sleep": sleep, "settle": settle}
    finally:
        sandbox.cleanup()
        pool.close()
    figures = {"machine": info, "quick": args.quick, "unit": "s", "backend_startup_setting": startup,
               "pdtui_local": figures_of(local), "pdtui_ssh": figures_of(ssh, ssh_conns),
               "floor_ssh": figures_of(floor), **loops}
    overhead = figures["pdtui_ssh"]["overhead"]["p50"]
    figures["beyond_floor"] = round(overhead - figures["floor_ssh"]["overhead"]["p50"], 3)
    figures["ratios"] = {f"{name}_overhead_over_pdtui_ssh": round(loops[name]["overhead"]["p50"] / overhead, 1)
                         for name in loops}
    figures["target"] = {"overhead_s": 0.5, "met": overhead <= 0.5, "beyond_floor_s": 0.25,
                         "beyond_floor_met": figures["beyond_floor"] <= 0.25,
                         "connections_per_host": 1, "connections_met": set(ssh_conns) == {1}}
    emit(figures)


if __name__ == "__main__":
    main()
