"""Ready line -> the router's start on the host: a real systemd and journald against the stand-ins, over SSH.

The reference shape (sim prefill and decode, the sim router) is brought up N times
over loopback SSH on each of:
- ``real``: systemd 252 and journald booted in a container (pdtui/sim/systemd_host.py), units installed by
  ``pdtui units --install``; needs root and systemd-nspawn;
- ``journal-remote``: the stand-in systemctl, its lines in a journal file written by systemd-journal-remote and
  read by the real journalctl (what ``pdtui demo`` runs where it is installed);
- ``stand-in``: the stand-in systemctl and journalctl.

Each run is cut in four, every moment on the one clock of this machine (the container shares it):
- handover: the later backend's ready line, as the journal stamped it (``__REALTIME_TIMESTAMP``) -> pdtui's tail
  receives that entry (journald's batching of ``journalctl -f``, journalctl, sshd, asyncssh);
- checks: received -> both backends READY (the last one's ``/health`` asked through the connection);
- reaction: both READY -> pdtui issues the router's start (its STARTING event);
- command: issued -> the host's manager logs the router's start (systemd's "Starting ..." line; the stand-in's
  "Started ..."), read from the host's journal, not pdtui's clock;
and total = the ready line -> that host line.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import asyncssh

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import READY_LINE, Stamps, deployment, emit, machine, parse_args, summary  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from pdtui.commands import units_command as units  # noqa: E402
from pdtui.engine.events import StateChanged  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.engine.states import ServiceState  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim import realjournal, systemd_host  # noqa: E402
from pdtui.sim.command_lines import router_argv, worker_argv  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402
from pdtui.targets.systemd import journal_tail as journal  # noqa: E402
from pdtui.targets.systemd.journal_json import decode_field

STARTUP = 1.0      # seconds from a worker's start to its ready line: its tail is live well before
PHASES = ("handover", "checks", "reaction", "command", "total")
ReadJournal = Callable[[float], list[dict]]    # the journal's entries since a moment, as JSON objects


@contextmanager
def received_ready_lines() -> Iterator[dict[str, float]]:
    """When each ready line's entry reached pdtui's tail (by cursor): JournalTail's delivery, stamped."""
    seen: dict[str, float] = {}
    deliver = journal.JournalTail._deliver

    def stamped(self: journal.JournalTail, raw_lines: list[bytes]) -> None:
        now = time.time()
        for raw in raw_lines:
            if READY_LINE.encode() in raw:
                entry = json.loads(raw)
                seen.setdefault(entry["__CURSOR"], now)
        deliver(self, raw_lines)

    journal.JournalTail._deliver = stamped    # type: ignore[method-assign]
    try:
        yield seen
    finally:
        journal.JournalTail._deliver = deliver    # type: ignore[method-assign]


async def one_run(config: dict, where: Path, read: ReadJournal, names: dict[str, str]) -> dict[str, float]:
    """One bring-up; its four phases and total, in seconds."""
    stamps = Stamps()
    orchestrator = Orchestrator(deployment(config, where), Registry(make_host), smoke=False, canary=False)
    orchestrator.subscribe(stamps)
    t0 = time.time()
    with received_ready_lines() as received:
        try:
            done = await orchestrator.run()
        finally:
            await orchestrator.close()
    if not done.ok:
        raise RuntimeError(f"bring-up failed: {done.failures}")
    entries = [e for e in read(t0 - 1) if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= t0]
    ready = [e for e in entries if e.get("_SYSTEMD_UNIT") in (names["prefill"], names["decode"])
             and READY_LINE in decode_field(e.get("MESSAGE"))]
    last = max(ready, key=lambda e: int(e["__REALTIME_TIMESTAMP"]))

    def at(state: ServiceState, who: str) -> float:
        moment = stamps.first(lambda e: isinstance(e, StateChanged) and e.service == who and e.new is state)
        assert moment is not None, (who, state)
        return moment[0]

    issued = at(ServiceState.STARTING, "router")
    manager = started_at(entries, names["router"])
    line_at, got = int(last["__REALTIME_TIMESTAMP"]) / 1e6, received[last["__CURSOR"]]
    ready_at = max(at(ServiceState.READY, "prefill"), at(ServiceState.READY, "decode"))
    return {"handover": got - line_at, "checks": ready_at - got, "reaction": issued - ready_at,
            "command": manager - issued, "total": manager - line_at}


def started_at(entries: list[dict], unit: str) -> float:
    """When the manager logged the unit's start: systemd's first line of it ("Starting", or "Started" alone for a
    Type=simple unit), the stand-in's "Started"."""
    return min(int(e["__REALTIME_TIMESTAMP"]) / 1e6 for e in entries if e.get("UNIT") == unit
               and decode_field(e.get("MESSAGE")).startswith(("Starting", "Started")))


def shape(host: dict, ports: dict[str, int], programs: dict[str, list[str]] | None = None,
          units_of: dict[str, str] | None = None) -> dict:
    """The config: units named by ``units_of`` (stand-ins) or made from launch: blocks running ``programs``."""
    services = {}
    for name in ("prefill", "decode", "router"):
        svc: dict = {"host": "h", "role": name, "port": ports[name], "timeout": "60s"}
        if name == "prefill":
            svc["bootstrap_port"] = ports["bootstrap"]
        if programs is not None:
            launch: dict = {"command": programs[name], "env": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}}
            if name == "router":
                launch |= {"host": "127.0.0.1", "prometheus_port": free_port()}
            else:
                launch |= {"model": "m", "tp": 1, "args": ["--startup", str(STARTUP)]}
            svc |= {"unit": f"bench-{name}", "launch": launch}
        else:
            assert units_of is not None
            svc["unit"] = units_of[name]
        services[name] = svc
    return {"name": "bench-real-journald", "hosts": {"h": host}, "services": services}


def fresh_ports() -> dict[str, int]:
    return {name: free_port() for name in ("prefill", "decode", "router", "bootstrap")}


def real_runs(pool: SshdPool, count: int) -> tuple[list[dict[str, float]], dict]:
    folder = Path(tempfile.mkdtemp(prefix="pdtui-bench-systemd-"))
    host = systemd_host.boot(folder / "container", client_key=pool.client_key)
    try:
        with pool.known_hosts.open("a") as out:
            out.write(host.known_hosts_line)
        programs = {"prefill": [sys.executable, "-m", "pdtui.sim.worker"],
                    "decode": [sys.executable, "-m", "pdtui.sim.worker"],
                    "router": [sys.executable, "-m", "pdtui.sim.router"]}
        config = shape({"address": "127.0.0.1", "port": host.port, "user": "root",
                        "known_hosts": str(pool.known_hosts)}, fresh_ports(), programs)
        with redirect_stdout(sys.stderr):     # its lines are not the bench's figures
            asyncio.run(units.install(deployment(config, folder), make_host, yes=True))
        names = {name: f"bench-{name}.service" for name in ("prefill", "decode", "router")}

        def read(since: float) -> list[dict]:
            out = host.run("journalctl", "-o", "json", "--no-pager", f"--since=@{since:.6f}").stdout
            return [json.loads(line) for line in out.splitlines() if line]

        runs = []
        for _ in range(count):
            runs.append(asyncio.run(one_run(config, folder, read, names)))
            host.run("systemctl", "stop", *names.values())
        return runs, asyncio.run(floors(host, pool, count))
    finally:
        host.stop()
        shutil.rmtree(folder, ignore_errors=True)     # its config and the container's empty root


async def floors(host: systemd_host.SystemdHost, pool: SshdPool, count: int) -> dict:
    """What the phases cost without pdtui, over one asyncssh connection to the same host: a remote command's
    own start (the login shell), ``systemctl start`` to the manager's line, and journald's hand-over of a line to
    ``journalctl -f``."""
    unit = "bench-floor.service"    # no start limit: it is started ``count`` times in a row
    host.run("sh", "-c", f"printf '[Unit]\\nStartLimitIntervalSec=0\\n[Service]\\nExecStart=/bin/sleep 1000\\n' "
                         f"> /etc/systemd/system/{unit} && systemctl daemon-reload")
    known = asyncssh.read_known_hosts(str(pool.known_hosts))
    async with asyncssh.connect("127.0.0.1", host.port, username="root", client_keys=[pool.client_key],
                                known_hosts=known) as conn:
        shell, start = [], []
        for _ in range(count):
            t = time.time()
            await conn.run("true", check=True)
            shell.append(time.time() - t)
            host.run("systemctl", "stop", unit)
            t = time.time()
            await conn.run(f"systemctl start {unit}", check=True)
            out = host.run("journalctl", "-o", "json", "--no-pager", "-u", unit, f"--since=@{int(t) - 1}").stdout
            entries = [json.loads(line) for line in out.splitlines() if line]
            start.append(started_at([e for e in entries if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= t], unit) - t)
        host.run("systemctl", "stop", unit)
        handover = await _handover(conn, host, count)
    return {"shell": summary(shell, 1000, 1), "start": summary(start, 1000, 1), "handover": summary(handover, 1000, 1)}


async def _handover(conn: asyncssh.SSHClientConnection, host: systemd_host.SystemdHost, count: int) -> list[float]:
    """Seconds from each line's journal stamp to its arrival through ``journalctl -f`` over the connection."""
    ticker = "bench-ticker.service"
    delays: list[float] = []
    async with conn.create_process("journalctl -f -o json --no-pager --lines=0") as tail:
        await _until_following(tail, host)
        host.run("systemd-run", f"--unit={ticker}", "sh", "-c", f"for i in $(seq {count}); do echo tick $i; "
                 "sleep 0.13; done")
        while len(delays) < count:
            entry = json.loads(await asyncio.wait_for(tail.stdout.readline(), 10))
            if entry.get("_SYSTEMD_UNIT") == ticker and str(entry.get("MESSAGE", "")).startswith("tick"):
                delays.append(time.time() - int(entry["__REALTIME_TIMESTAMP"]) / 1e6)
    return delays


async def _until_following(tail: asyncssh.SSHClientProcess, host: systemd_host.SystemdHost) -> None:
    """Until the follower is in place: a marker logged again every half second until it comes through (a
    follower that starts late, on a loaded machine, would miss the ticker's lines)."""
    marker = f"bench-marker-{time.time_ns()}"
    async with asyncio.timeout(60):
        while True:
            host.run("logger", marker)
            try:
                while True:
                    line = await asyncio.wait_for(tail.stdout.readline(), 0.5)
                    if marker in line:
                        return
            except TimeoutError:
                continue


def sandbox_runs(pool: SshdPool, real_journal: bool, count: int) -> list[dict[str, float]]:
    sandbox = Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-sim-")), real_journal=real_journal)
    server = pool.start()
    runs = []
    try:
        def read(since: float) -> list[dict]:
            argv = [*sandbox.commands["journalctl"], "-o", "json", "--no-pager", f"--since=@{since:.6f}"]
            out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
            return [json.loads(line) for line in out.splitlines() if line]

        for index in range(count):
            ports = fresh_ports()
            units_of = {
                "prefill": sandbox.add_unit(f"bp{index}", worker_argv("prefill", ports["prefill"],
                                                                      bootstrap=ports["bootstrap"], startup=STARTUP)),
                "decode": sandbox.add_unit(f"bd{index}", worker_argv("decode", ports["decode"], bootstrap=ports["bootstrap"],
                                                                    startup=STARTUP)),
                "router": sandbox.add_unit(f"br{index}", router_argv(ports["router"],
                                                                     [(ports["prefill"], ports["bootstrap"])],
                                                                     [ports["decode"]], package="sim")),
            }
            config = shape(pool.host(server, sandbox), ports, units_of=units_of)
            runs.append(asyncio.run(one_run(config, sandbox.root, read, units_of)))
            sandbox.stop_all()
    finally:
        sandbox.cleanup()
    return runs


def figures_of(runs: list[dict[str, float]]) -> dict:
    return {phase: summary([run[phase] for run in runs], 1000, 1) for phase in PHASES}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    count = 1 if args.quick else 20
    info = machine()
    pool = SshdPool()
    kinds: dict[str, dict] = {}
    try:
        missing = systemd_host.missing_reason()
        if missing:
            kinds["real"] = {"skipped": missing}
        else:
            runs, floor = real_runs(pool, count)
            kinds["real"] = figures_of(runs) | {"floors": floor}
        if realjournal.available() and not args.quick:
            kinds["journal-remote"] = figures_of(sandbox_runs(pool, True, count))
        kinds["stand-in"] = figures_of(sandbox_runs(pool, False, count))
    finally:
        pool.close()
    emit({"machine": info, "quick": args.quick, "unit": "ms", "runs": count, **kinds})


if __name__ == "__main__":
    main()
