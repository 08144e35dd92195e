"""Real SGLang under pdtui on the real manager, side by side with the sim's worker: what a bring-up costs.

One container (a real systemd and journald, a network of its own, reached over
real SSH: pdtui/sim/systemd_host.py), units installed by ``pdtui units
--install``. Each round brings up a prefill, a decode and smg, first with real
SGLang 0.5.23 on the CPU serving the tiny model (pdtui/sim/real_sglang.py), then
with the sim's worker given the same flags and a start-up as long as real
SGLang's took in that round, then stops them. Every moment is on this machine's
one clock (the container shares it): journal stamps, systemd's process start,
pdtui's events as they arrive. For each server:

- ``own``: the server's own start, from its process's start (systemd's
  ExecMainStartTimestampMonotonic) to its ready line's journal stamp;
- ``checked``: its ready line's stamp to pdtui's READY (journald's hand-over,
  its ``/health``, about a second on a CPU worker, and the bootstrap check);

and for the bring-up:
- ``before``: pdtui's start to the first server process's start (the preflight,
  the units looked at, the start commands);
- ``reaction``: the later ready line's stamp to the manager's own line about the
  router's start (what section 11 measures with the sim alone);
- ``router``: that line to the router's READY (its own start, its workers'
  activation, pdtui's probe, the smoke generation and the KV checks);
- ``total``: pdtui's start to its last event; ``overhead``: total less the
  slower server's own start.

Figures in seconds, medians over the rounds. On a failed bring-up the bench
prints the units' last journal lines and stops.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Stamps, deployment, emit, machine, parse_args  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from bench.real_journald import started_at  # noqa: E402
from pdtui.commands import units_command as units  # noqa: E402
from pdtui.config import Deployment  # noqa: E402
from pdtui.engine.events import Done, PhaseStarted, StateChanged  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.engine.states import ServiceState  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim import real_sglang  # noqa: E402
from pdtui.sim import systemd_host as container  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SERVERS = ("prefill", "decode")
KINDS = ("real", "sim")


def config(host: dict, model: Path, kind: str, startup: float) -> dict[str, Any]:
    """prefill, decode and smg on the container: real SGLang (``kind`` real) or the sim's worker with its flags and
    a start-up of ``startup`` seconds."""
    p, d, r, boot = (free_port() for _ in range(4))

    def server(role: str) -> dict[str, Any]:
        launch = real_sglang.launch(role, model)
        if kind == "sim":
            del launch["python"]
            launch.update(command=[sys.executable, "-m", "pdtui.sim.worker"],
                          args=[*launch["args"], "--startup", f"{startup:.1f}"],
                          env={**launch["env"], "PYTHONPATH": str(REPO)})
        return launch

    def service(role: str, port: int, launch: dict[str, Any]) -> dict[str, Any]:
        return {"host": "cpu0", "unit": f"{kind}-{role}", "role": role, "port": port, "timeout": "5m",
                "launch": launch}

    return {"name": f"bench-{kind}", "hosts": {"cpu0": host}, "services": {
        "prefill": {**service("prefill", p, server("prefill")), "bootstrap_port": boot},
        "decode": service("decode", d, server("decode")),
        "router": service("router", r, {"package": "smg", "python": sys.executable, "host": "127.0.0.1",
                                         "prometheus_port": free_port()})}}


class Round:
    """One bring-up of a deployment on the container, and its figures (see the module's docstring)."""

    def __init__(self, host: container.SystemdHost, plan: Deployment) -> None:
        self.host, self.plan = host, plan
        self.unit = {name: str(svc.unit) for name, svc in plan.services.items()}

    async def run(self) -> dict[str, float]:
        stamps = Stamps()
        orchestrator = Orchestrator(self.plan, Registry(make_host))
        orchestrator.subscribe(stamps)
        t0 = time.time()
        try:
            done: Done = await orchestrator.run()
        finally:
            await orchestrator.close()
        if not done.ok:
            self.stop()
            raise SystemExit(f"bench: the bring-up failed: {done.failures}\n{self.journal_tail()}")
        figures = self.figures(stamps, t0, time.time())
        self.stop()
        return figures

    def figures(self, stamps: Stamps, t0: float, end: float) -> dict[str, float]:
        def when(predicate: Any) -> tuple[float, Any]:
            found = stamps.first(predicate)
            assert found is not None
            return found

        def ready(name: str) -> float:
            return when(lambda e: isinstance(e, StateChanged) and e.service == name and e.new is ServiceState.READY)[0]

        line = {name: when(lambda e, n=name: isinstance(e, PhaseStarted) and e.service == n
                           and e.phase == "ready")[1].at for name in SERVERS}
        started = {name: self.process_start(name) for name in SERVERS}
        figures: dict[str, float] = {}
        for name in SERVERS:
            figures[f"{name}_own"] = line[name] - started[name]
            figures[f"{name}_checked"] = ready(name) - line[name]
        entries = self.journal(t0)
        router_started = started_at(entries, self.unit["router"])
        figures["before"] = min(started.values()) - t0
        figures["reaction"] = router_started - max(line.values())
        figures["router"] = ready("router") - router_started
        figures["total"] = end - t0
        figures["overhead"] = figures["total"] - max(figures[f"{name}_own"] for name in SERVERS)
        return figures

    def process_start(self, name: str) -> float:
        """When systemd started the server's process, on the wall clock (the container shares the monotonic one)."""
        shown = self.host.run("systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value",
                              self.unit[name]).stdout
        return int(shown.strip()) / 1e6 + time.time() - time.monotonic()

    def journal(self, since: float) -> list[dict]:
        out = self.host.run("journalctl", "-o", "json", "--no-pager", f"--since=@{since - 1:.6f}").stdout
        return [entry for entry in map(json.loads, out.splitlines())
                if int(entry["__REALTIME_TIMESTAMP"]) / 1e6 >= since]

    def journal_tail(self) -> str:
        return self.host.run("journalctl", "--no-pager", "-n", "40", *(f"--unit={u}" for u in self.unit.values()),
                             timeout=60).stdout

    def stop(self) -> None:
        self.host.run("systemctl", "stop", *self.unit.values(), timeout=120)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument("--rounds", type=int, default=3))
    for reason in (container.missing_reason(), real_sglang.missing_reason()):
        if reason:
            sys.exit(f"bench: {reason}")
    rounds = 1 if args.quick else args.rounds
    where = machine()     # the load before the servers' start
    folder = Path(tempfile.mkdtemp(prefix="pdtui-bench-real-"))
    pool = SshdPool(folder / "ssh")
    model = real_sglang.make_model(folder, real_sglang.corpus())
    host = container.boot(folder / "container", client_key=pool.client_key, private_network=True,
                          binds={str(model): model})
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    try:
        with pool.known_hosts.open("a") as out:
            out.write(host.known_hosts_line)
        address = {"address": "127.0.0.1", "port": host.port, "user": "root", "known_hosts": str(pool.known_hosts)}
        with host.network():
            for _ in range(rounds):
                for kind in KINDS:
                    startup = (statistics.fmean(runs["real"][-1][f"{n}_own"] for n in SERVERS)
                               if kind == "sim" else 0.0)
                    plan = deployment(config(address, model, kind, startup), folder)
                    with redirect_stdout(sys.stderr):     # its lines are not the bench's figures
                        asyncio.run(units.install(plan, make_host, yes=True))
                    runs[kind].append(asyncio.run(Round(host, plan).run()))
    finally:
        host.stop()
        shutil.rmtree(folder, ignore_errors=True)
    emit({"bench": "real_sglang", "rounds": rounds, "machine": where,
          **{kind: {key: round(statistics.median(run[key] for run in done), 3) for key in done[0]}
             for kind, done in runs.items()}})


if __name__ == "__main__":
    main()
