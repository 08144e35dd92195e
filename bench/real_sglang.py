"""Real SGLang (or real vLLM) under pdtui on the real manager, side by side with an expert's own bring-up.

One container (a real systemd and journald, a network of its own, reached over
real SSH: pdtui/sim/systemd_host.py), units installed by ``pdtui units
--install``: a prefill, a decode (real SGLang 0.5.23, or with ``--engine vllm``
real vLLM 0.32 with NIXL, on the CPU serving the tiny model) and their router
(smg; vllm-router). A preflight alone first asks the installed engine for its arguments, which pdtui keeps from
then on (the bench's own cache: each later bring-up asks the engine's version alone, as after a user's first).
Each round brings them up twice, then stops them:

- ``pdtui``: the engine as ``pdtui up`` runs it (its preflight, the starts, the
  readiness checks, the router's start, its probe, the smoke and the KV seen
  moving);
- ``floor``: what an expert's own script does, over one SSH connection to the
  same container: ``journalctl -f`` on both servers, ``systemctl start`` both,
  each one's ready line, one ``/health`` of each, ``systemctl start`` the
  router, its readiness polled every 50 ms, one generation through it.

Every moment is on this machine's one clock (the container shares it): journal
stamps, systemd's process start, when each bring-up received a line, the
manager's own line about the router's start. For each bring-up:

- ``before``: its start to the first server process's start;
- ``prefill_own``, ``decode_own``: the server's own start (its process's start
  to its ready line's journal stamp);
- ``handover``: the later ready line's stamp to its arrival at the bring-up
  (journald's hand-over, and the SSH channel's);
- ``reaction``: that arrival to the manager's line on the router's start;
- ``router``: that line to the bring-up's end (READY; the floor's answer);
- ``total``: its start to its end; ``overhead``: total less the slower server's
  own start.

``difference`` is pdtui's median less the floor's, per figure (medians of separate figures need not add up:
``each_round`` has every round's). With ``--watch
S`` the last round then watches the ready deployment as the TUI does (every
server's figures shown) for S seconds and counts, in each server's access
lines, the requests pdtui sent (``from=pdtui``, by path) and the generations
that reached it (the canary's, through the router, beside the router's own
health checks), per minute. Figures in seconds, medians over the rounds. On a
failed bring-up the bench prints the units' last journal lines and stops.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import asyncssh

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import Stamps, deployment, emit, machine, parse_args  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from bench.real_journald import started_at  # noqa: E402
from pdtui.commands import units_command as units  # noqa: E402
from pdtui.config import Deployment  # noqa: E402
from pdtui.engine.events import Done, PhaseStarted  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim import real_sglang, real_vllm  # noqa: E402
from pdtui.sim import systemd_host as container  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.support.argv import flag_value  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402

SERVERS = ("prefill", "decode")
KINDS = ("pdtui", "floor")
READY_LINE = {"sglang": "The server is fired up and ready to roll!", "vllm": "Application startup complete."}
ROUTER = {"sglang": "smg", "vllm": None}       # the router's package (vLLM's: vllm-router, its engine's own)
ENGINES = {"sglang": real_sglang, "vllm": real_vllm}
FLOOR_POLL = 0.05
ACCESS = re.compile(r'"(GET|POST) (\S+) HTTP/1\.1" (\d{3})')


def config(host: dict, model: Path, engine: str) -> dict[str, Any]:
    """prefill, decode and their router on the container, each a unit from its ``launch:`` block."""
    p, d, r, boot = (free_port() for _ in range(4))
    launch = ENGINES[engine].launch

    def service(role: str, port: int, block: dict[str, Any]) -> dict[str, Any]:
        return {"host": "cpu0", "unit": f"bench-{role}", "role": role, "port": port, "timeout": "5m", "launch": block}

    router = {"python": sys.executable, "host": "127.0.0.1", "prometheus_port": free_port()}
    if ROUTER[engine]:
        router["package"] = ROUTER[engine]
    prefill = service("prefill", p, launch("prefill", model))
    if engine == "sglang":
        prefill["bootstrap_port"] = boot
    return {"name": f"bench-{engine}", "engine": engine, "hosts": {"cpu0": host}, "services": {
        "prefill": prefill, "decode": service("decode", d, launch("decode", model)),
        "router": service("router", r, router)}}


class Box:
    """The container's units of one deployment: their process starts, their journal, their stop."""

    def __init__(self, host: container.SystemdHost, plan: Deployment) -> None:
        self.host, self.plan = host, plan
        self.unit = {name: str(svc.unit) for name, svc in plan.services.items()}

    def process_start(self, name: str) -> float:
        """When systemd started the server's process, on the wall clock (the container shares the monotonic one)."""
        shown = self.host.run("systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value",
                              self.unit[name]).stdout
        return int(shown.strip()) / 1e6 + time.time() - time.monotonic()

    def journal(self, since: float) -> list[dict]:
        out = self.host.run("journalctl", "-o", "json", "--no-pager", f"--since=@{since - 1:.6f}", timeout=60).stdout
        return [entry for entry in map(json.loads, out.splitlines())
                if int(entry["__REALTIME_TIMESTAMP"]) / 1e6 >= since]

    def journal_tail(self) -> str:
        return self.host.run("journalctl", "--no-pager", "-n", "40", *(f"--unit={u}" for u in self.unit.values()),
                             timeout=60).stdout

    def stop(self) -> None:
        self.host.run("systemctl", "stop", *self.unit.values(), timeout=120)

    def figures(self, t0: float, end: float, ready_line: dict[str, float], received: float) -> dict[str, float]:
        """The figures of one bring-up (the module's docstring) from its own moments and the container's."""
        started = {name: self.process_start(name) for name in SERVERS}
        router_started = started_at(self.journal(t0), self.unit["router"])
        own = {name: ready_line[name] - started[name] for name in SERVERS}
        total = end - t0
        return {"before": min(started.values()) - t0, **{f"{name}_own": own[name] for name in SERVERS},
                "handover": received - max(ready_line.values()), "reaction": router_started - received,
                "router": end - router_started, "total": total, "overhead": total - max(own.values())}


async def with_pdtui(box: Box, watch: float) -> tuple[dict[str, float], dict[str, Any] | None]:
    """pdtui's bring-up (as ``pdtui up``), and with ``watch`` its requests while it watches afterwards."""
    stamps = Stamps()
    orchestrator = Orchestrator(box.plan, Registry(make_host))
    orchestrator.subscribe(stamps)
    t0 = time.time()
    counted = None
    try:
        done: Done = await orchestrator.run()
        end = time.time()
        if done.ok and watch:
            counted = await watched(box, orchestrator, watch)
    finally:
        await orchestrator.close()
    if not done.ok:
        box.stop()
        raise SystemExit(f"bench: pdtui's bring-up failed: {done.failures}\n{box.journal_tail()}")

    def ready_line(name: str) -> tuple[float, float]:
        found = stamps.first(lambda e: isinstance(e, PhaseStarted) and e.service == name and e.phase == "ready")
        assert found is not None, name
        return found[0], found[1].at            # type: ignore[attr-defined]

    seen = {name: ready_line(name) for name in SERVERS}
    later = max(SERVERS, key=lambda name: seen[name][1])
    return box.figures(t0, end, {name: at for name, (_, at) in seen.items()}, seen[later][0]), counted


async def watched(box: Box, orchestrator: Orchestrator, seconds: float) -> dict[str, Any]:
    """What reached each server while pdtui watched the ready deployment for ``seconds``, as the TUI does (every
    server's figures shown), per minute: pdtui's own requests by path, and the generations."""
    orchestrator.show_figures(list(box.plan.services))
    since = time.time()
    await asyncio.sleep(seconds)
    entries = box.journal(since)
    counts: dict[str, Any] = {}
    for name in SERVERS:
        mine: Counter[str] = Counter()
        generations = 0
        for entry in entries:
            message = entry.get("MESSAGE")
            if entry.get("_SYSTEMD_UNIT") != box.unit[name] or not isinstance(message, str):
                continue
            if (found := ACCESS.search(message)) is None:
                continue
            method, path, _ = found.groups()
            if "from=pdtui" in path:
                mine[f"{method} {path.partition('?')[0]}"] += 1
            elif method == "POST":
                generations += 1
        scale = 60.0 / seconds
        counts[name] = {"pdtui": {path: round(n * scale, 1) for path, n in sorted(mine.items())},
                        "generations": round(generations * scale, 1)}
    return counts


async def kept_arguments(plan: Deployment) -> None:
    """A preflight alone, before the rounds: the installed engine's arguments are asked once (seconds of its
    imports) and kept in the cache as they are after a user's first bring-up; each round's preflight then asks its
    version alone, as every later bring-up does."""
    orchestrator = Orchestrator(plan, Registry(make_host))
    try:
        await orchestrator.preflight()
    finally:
        await orchestrator.close()


class Follower:
    """``journalctl -f`` on the servers' units over SSH: when each one's ready line arrived, by its stamp."""

    def __init__(self, process: asyncssh.SSHClientProcess, unit: dict[str, str], line: str) -> None:
        self.process, self.line = process, line
        self.names = {u: name for name, u in unit.items()}
        self.stamped: dict[str, float] = {}
        self.received: dict[str, float] = {}

    async def until_ready(self) -> None:
        async for text in self.process.stdout:
            entry = json.loads(text)
            name = self.names.get(entry.get("_SYSTEMD_UNIT", ""))
            if name in SERVERS and name not in self.received and self.line in str(entry.get("MESSAGE", "")):
                self.received[name] = time.time()
                self.stamped[name] = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
                if len(self.received) == len(SERVERS):
                    return


def fetch(port: int, path: str, body: dict | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


async def floor(box: Box, address: dict, pool: SshdPool, engine: str, model: str) -> dict[str, float]:
    """The expert's own bring-up of the same units (the module's docstring), timed the same way."""
    ports = {name: svc.port for name, svc in box.plan.services.items()}
    unit = box.unit
    t0 = time.time()
    async with asyncssh.connect(address["address"], port=address["port"], username="root",
                                client_keys=[pool.client_key], known_hosts=str(pool.known_hosts)) as ssh:
        follow = await ssh.create_process(f"journalctl -f -n 0 -o json --unit={unit['prefill']} "
                                          f"--unit={unit['decode']}")
        follower = Follower(follow, unit, READY_LINE[engine])
        await ssh.run(f"systemctl start {unit['prefill']} {unit['decode']}", check=True)
        await follower.until_ready()
        follow.terminate()
        for name in SERVERS:
            while await asyncio.to_thread(fetch, ports[name], "/health") != 200:
                await asyncio.sleep(FLOOR_POLL)
        await ssh.run(f"systemctl start {unit['router']}", check=True)
        readiness = "/readiness" if engine == "sglang" else "/health"
        while await asyncio.to_thread(fetch, ports["router"], readiness) != 200:
            await asyncio.sleep(FLOOR_POLL)
        body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 4,
                "temperature": 0}
        while await asyncio.to_thread(fetch, ports["router"], "/v1/chat/completions", body) != 200:
            await asyncio.sleep(FLOOR_POLL)
    end = time.time()
    later = max(SERVERS, key=lambda name: follower.stamped[name])
    return box.figures(t0, end, follower.stamped, follower.received[later])


def served_model(plan: Deployment) -> str:
    """The model name the router routes by: what the servers serve (their --served-model-name, else the path)."""
    launch = plan.services["prefill"].launch
    assert launch is not None
    return flag_value(launch.args, "--served-model-name") or str(launch.model)


def main() -> None:
    def options(parser: Any) -> None:
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--engine", choices=tuple(ENGINES), default="sglang")
        parser.add_argument("--watch", type=float, default=0.0, help="seconds of watching after the last round")

    args = parse_args(__doc__.splitlines()[0], options)
    real = ENGINES[args.engine]
    for reason in (container.missing_reason(), real.missing_reason()):
        if reason:
            sys.exit(f"bench: {reason}")
    rounds = 1 if args.quick else args.rounds
    where = machine()     # the load before the servers' start
    folder = Path(tempfile.mkdtemp(prefix="pdtui-bench-real-"))
    pool = SshdPool(folder / "ssh")
    model = real.make_model(folder, real_sglang.corpus())
    host = container.boot(folder / "container", client_key=pool.client_key, private_network=True,
                          binds={str(model): model})
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    counted = None
    try:
        with pool.known_hosts.open("a") as out:
            out.write(host.known_hosts_line)
        address = {"address": "127.0.0.1", "port": host.port, "user": "root", "known_hosts": str(pool.known_hosts)}
        plan = deployment(config(address, model, args.engine), folder)
        box = Box(host, plan)
        with host.network():
            with redirect_stdout(sys.stderr):     # its lines are not the bench's figures
                asyncio.run(units.install(plan, make_host, yes=True))
                asyncio.run(kept_arguments(plan))
            for number in range(rounds):
                watch = args.watch if number == rounds - 1 else 0.0
                figures, told = asyncio.run(with_pdtui(box, watch))
                runs["pdtui"].append(figures)
                counted = told or counted
                box.stop()
                runs["floor"].append(asyncio.run(floor(box, address, pool, args.engine, served_model(plan))))
                box.stop()
    finally:
        host.stop()
        shutil.rmtree(folder, ignore_errors=True)
    medians = {kind: {key: round(statistics.median(run[key] for run in done), 3) for key in done[0]}
               for kind, done in runs.items()}
    emit({"bench": "real_sglang", "engine": args.engine, "rounds": rounds, "machine": where, **medians,
          "difference": {key: round(medians["pdtui"][key] - medians["floor"][key], 3) for key in medians["floor"]},
          "each_round": {kind: [{key: round(value, 3) for key, value in run.items()} for run in done]
                         for kind, done in runs.items()},
          **({"watched": {"seconds": args.watch, "per_minute": counted}} if counted else {})})


if __name__ == "__main__":
    main()
