"""An in-memory fleet: hosts whose systemd, journal, nvidia-smi and HTTP servers are answered in-process.

pdtui's own cost at scale (a thousand services) is hidden behind anything real:
processes, SSH and a journal on disk all cost far more than the engine. A
:class:`MemoryHost` implements the Host protocol (pdtui/hosts/base.py) with no
process, no socket and no file. It answers the commands the engine sends
(``systemctl show/start/enable [--now]/restart/disable --now/cat``, ``journalctl``
for the journal's end and an invocation's history, ``nvidia-smi`` queries, and
the preflight's two scripts: the GPU inventory and the fabric), streams ``journalctl -f -o json`` and ``nvidia-smi -lms`` output,
and serves HTTP on its services' ports through in-memory connections, so the
engine's own HTTP client (through :meth:`MemoryHost.open_tcp`) does
the probes.

What its servers log as they start and answer over HTTP (SGLang's backends, the
routers) is :mod:`pdtui.sim.memservers`'s; a host plays their start-up scripts
into its journal and carries their requests.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import PurePosixPath

import orjson

from pdtui.config import Deployment
from pdtui.gpus.nvidia_smi import MARK, QUERY_GPU_FIELDS
from pdtui.hosts.base import HostError, HostTimedOut, Result, each_line
from pdtui.sim.memservers import MemoryService, Step, answer, bootstrap_of, router_workers, stamp, start_script
from pdtui.sim.sysfs import FabricShape, listing
from pdtui.targets.systemd.commands import SHOW_PROPERTIES, START_AND_SHOW
from pdtui.targets.systemd.settings import HostConfig

BOOT_ID = uuid.UUID(int=0xB007).hex
GPU_NAME = "NVIDIA H200"
FABRIC = listing(FabricShape())
GPU_MIB = 143771
_pids = itertools.count(4000)


class Meter:
    """Time the memory hosts spend answering (a ``with`` block adds its duration): the bench takes it away
    from the process's CPU time, leaving the engine's own."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0 = 0.0

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._t0


class MemoryJournal:
    """One host's journal: entries encoded once as ``journalctl -o json`` prints them; a cursor is an index."""

    def __init__(self, host: str, meter: Meter) -> None:
        self.host = host
        self.meter = meter
        self.id = uuid.uuid4().hex
        self.lines: list[bytes] = []
        self.units: list[str] = []                 # the unit each entry is about (a tail's ``-u`` matches it)
        self.invocations: list[str | None] = []    # _SYSTEMD_INVOCATION_ID of a process's own lines
        self._waiters: list[asyncio.Future[None]] = []
        self._notify: asyncio.Handle | None = None
        self.append("init.scope", None, "Journal started.", pid=1, comm="systemd", system=False)

    def append(self, unit: str, invocation: str | None, message: str, *, pid: int, comm: str, system: bool,
               priority: int = 6) -> None:
        """Add one entry; followers are woken once per loop turn, as a pipe delivers what was written meanwhile."""
        index = len(self.lines)
        entry = {"__CURSOR": f"s={self.id};i={index:x}", "__REALTIME_TIMESTAMP": str(time.time_ns() // 1000),
                 "__MONOTONIC_TIMESTAMP": str(time.monotonic_ns() // 1000), "_BOOT_ID": BOOT_ID,
                 "PRIORITY": str(priority), "_PID": str(pid), "_COMM": comm, "SYSLOG_IDENTIFIER": comm,
                 "_TRANSPORT": "journal" if system else "stdout", "_HOSTNAME": self.host}
        if system:
            entry |= {"_SYSTEMD_UNIT": "init.scope", "UNIT": unit, "INVOCATION_ID": invocation or ""}
        else:
            entry |= {"_SYSTEMD_UNIT": unit, "_SYSTEMD_INVOCATION_ID": invocation or ""}
        entry["MESSAGE"] = message
        self.lines.append(orjson.dumps(entry))
        self.units.append(unit)
        self.invocations.append(None if system else invocation)
        if self._waiters and self._notify is None:
            self._notify = asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._notify = None
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        """Until an entry is appended."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def position(self, cursor: str | None) -> int:
        """The index after ``cursor``'s entry; the end for no cursor."""
        if cursor is None:
            return len(self.lines)
        _, _, index = cursor.rpartition("i=")
        return int(index, 16) + 1

    def history(self, invocations: set[str]) -> str:
        """Every entry of ``invocations`` so far, as ``journalctl -o json`` prints them."""
        return "".join(line.decode() + "\n" for line, inv in zip(self.lines, self.invocations, strict=True)
                       if inv in invocations)


class JournalStream:
    """A running ``journalctl -f -o json -u ...``: the matching entries after a position, batch by batch."""

    exit_status: int | None = None
    stderr = ""

    def __init__(self, journal: MemoryJournal, units: Iterable[str], position: int) -> None:
        self.journal = journal
        self.units = frozenset(units)
        self.position = position

    def __aiter__(self) -> AsyncIterator[bytes]:
        return each_line(self.batches())

    async def batches(self) -> AsyncIterator[list[bytes]]:
        journal, units = self.journal, self.units
        while True:
            end = len(journal.lines)
            with journal.meter:
                batch = [journal.lines[i] for i in range(self.position, end) if journal.units[i] in units]
            self.position = end
            if batch:
                yield batch
            else:
                await journal.wait()


class GpuStream:
    """A running ``nvidia-smi --query-gpu=... -lms N``: one line per GPU every N ms."""

    exit_status: int | None = None
    stderr = ""

    def __init__(self, host: MemoryHost, interval: float) -> None:
        self.host = host
        self.interval = interval

    def __aiter__(self) -> AsyncIterator[bytes]:
        return each_line(self.batches())

    async def batches(self) -> AsyncIterator[list[bytes]]:
        while True:
            with self.host.fleet.meter:
                lines = [f"{i}, {used}, {GPU_MIB}, {util}".encode() for i, used, util in self.host.gpu_use()]
            yield lines
            await asyncio.sleep(self.interval)


class MemoryConnection:
    """Both ends of one in-memory TCP connection to a service's HTTP port: requests in, responses out."""

    def __init__(self, serve: Callable[[str, str, bytes], tuple[int, bytes]], meter: Meter) -> None:
        self._serve = serve
        self._meter = meter
        self._in = bytearray()
        self._out = bytearray()
        self._closed = False
        self._readable: asyncio.Future[None] | None = None

    # -- the client's writer
    def write(self, data: bytes) -> None:
        with self._meter:
            self._in += data
            while self._answer_one():
                pass

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self._closed = True
        self._wake()

    async def wait_closed(self) -> None:
        return None

    # -- the client's reader
    async def read(self, n: int = -1) -> bytes:
        while not self._out and not self._closed:
            self._readable = asyncio.get_running_loop().create_future()
            await self._readable
        size = len(self._out) if n < 0 else min(n, len(self._out))
        chunk = bytes(self._out[:size])
        del self._out[:size]
        return chunk

    def at_eof(self) -> bool:
        return self._closed and not self._out

    def _wake(self) -> None:
        if self._readable is not None and not self._readable.done():
            self._readable.set_result(None)

    def _answer_one(self) -> bool:
        """Answer the first complete request in the input, if there is one."""
        end = self._in.find(b"\r\n\r\n")
        if end < 0:
            return False
        head = bytes(self._in[:end]).decode("latin-1").split("\r\n")
        method, target, _ = head[0].split(" ", 2)
        length = next((int(value) for name, _, value in (line.partition(":") for line in head[1:])
                       if name.strip().lower() == "content-length"), 0)
        if len(self._in) < end + 4 + length:
            return False
        body = bytes(self._in[end + 4:end + 4 + length])
        del self._in[:end + 4 + length]
        status, payload = self._serve(method, target, body)
        reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}.get(status, "")
        self._out += (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                      f"content-length: {len(payload)}\r\n\r\n").encode() + payload
        self._wake()
        return True


def _kind(program: str, args: list[str]) -> str:
    """A command as counted: its program and verb (``systemctl show``, ``journalctl history``)."""
    if program == "systemctl":
        return f"systemctl {args[0] if args else ''}"
    if program == "journalctl":
        return "journalctl last entry" if "--lines=1" in args else "journalctl history"
    if program == "nvidia-smi":
        return f"nvidia-smi {next((a[2:].partition('=')[0] for a in args if a.startswith('--query')), ' '.join(args))}"
    if program == "sh" and len(args) > 2:
        return f"sh {args[2]}"       # the script's name: pdtui-gpus, pdtui-fabric
    return program


class MemoryFleet:
    """Every memory host of one deployment, made on demand by :meth:`host` (a HostFactory for the Orchestrator).

    ``unit_files``: the text of each unit as ``systemctl cat`` shows it, by unit name
    (e.g. from :func:`pdtui.targets.systemd.unit_files.render_units`), so the preflight's drift check
    has installed units to compare. ``failures``: what a backend does instead of getting ready (one of
    :data:`~pdtui.sim.memservers.FAILURES`), on every start until the entry is removed.
    """

    def __init__(self, deployment: Deployment, *, startup: float = 3.0, router_startup: float = 0.5,
                 unit_files: dict[tuple[str, str], str] | None = None,
                 failures: dict[str, str] | None = None) -> None:
        self.deployment = deployment
        self.failures = dict(failures or {})     # service -> a kind of FAILURES its next starts play
        self.broken_pairs: set[tuple[str, str]] = set()   # (prefill, decode): that decode never gets its KV
        self.startup = startup
        self.router_startup = router_startup
        self.unit_files = unit_files or {}
        self.services = {name: MemoryService(cfg, router_startup if cfg.role == "router" else startup)
                         for name, cfg in deployment.services.items()}
        self._on_host: dict[str, list[MemoryService]] = {}
        for service in self.services.values():
            self._on_host.setdefault(service.cfg.host, []).append(service)
        self.hosts: dict[str, MemoryHost] = {}
        self.counts: Counter[str] = Counter()     # commands by verb, HTTP requests by path, TCP connects
        self.stalls: Counter[str] = Counter()     # commands by verb: how many of the next hang until their timeout
        self.meter = Meter()

    def host(self, config: HostConfig, *, on_status: Callable[[str, str, str], None] | None = None,
             **_: object) -> MemoryHost:
        if config.name not in self.hosts:
            self.hosts[config.name] = MemoryHost(self, config, self._on_host.get(config.name, []), on_status)
        return self.hosts[config.name]

    def stop_all(self) -> None:
        """Cancel every start-up still scheduled (a bench ends with its units running, as pdtui leaves them)."""
        for service in self.services.values():
            service.stop()


class MemoryHost:
    """One host of a :class:`MemoryFleet`, implementing the Host protocol in memory."""

    def __init__(self, fleet: MemoryFleet, config: HostConfig, services: list[MemoryService],
                 on_status: Callable[[str, str, str], None] | None) -> None:
        self.name = config.name
        self.fleet = fleet
        self.config = config
        self.units = {s.unit: s for s in services}
        self.journal = MemoryJournal(config.name, fleet.meter)
        backends = [s for s in services if s.cfg.role in ("prefill", "decode")]
        self.gpu_count = max(8, 1 + max((g for s in backends for g in s.cfg.gpus), default=0))
        self._on_status = on_status
        self._connected = False
        self.last_input: bytes | None = None

    # -- the Host protocol ---------------------------------------------------
    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        """A command of pdtui's handled in memory; ``input`` (its stdin) is kept as the last one given."""
        self._connect()
        if input is not None:
            self.last_input = input
        await asyncio.sleep(0)
        words = list(argv[2:] if argv[:2] == ["sudo", "-n"] else argv)
        program = PurePosixPath(words[0]).name
        handler = {"systemctl": self._systemctl, "journalctl": self._journalctl, "nvidia-smi": self._nvidia_smi,
                   "sh": self._sh}.get(program)
        if handler is None:
            return Result(tuple(argv), 127, "", f"sh: 1: {program}: not found")
        if self.fleet.stalls[kind := _kind(program, words[1:])] > 0:     # a loaded host: stopped at its timeout
            self.fleet.stalls[kind] -= 1
            await asyncio.sleep(timeout if timeout is not None else math.inf)
            raise HostTimedOut.after(self.name, argv, timeout)
        with self.fleet.meter:
            self.fleet.counts[kind] += 1
            status, out, err = handler(words[1:])
        return Result(tuple(argv), status, out, err)

    @asynccontextmanager
    async def stream(self, argv: Sequence[str]) -> AsyncIterator[JournalStream | GpuStream]:
        self._connect()
        words = list(argv[2:] if argv[:2] == ["sudo", "-n"] else argv)
        program = PurePosixPath(words[0]).name
        self.fleet.counts[f"{program} (stream)"] += 1
        if program == "journalctl" and "--follow" in words:
            units = [w.removeprefix("--unit=") for w in words if w.startswith("--unit=")]
            cursor = next((w.removeprefix("--after-cursor=") for w in words if w.startswith("--after-cursor=")), None)
            yield JournalStream(self.journal, units, self.journal.position(cursor))
        elif program == "nvidia-smi" and "-lms" in words:
            yield GpuStream(self, int(words[words.index("-lms") + 1]) / 1000)
        else:
            raise HostError(f"{self.name}: the memory host streams no {program}")

    async def open_tcp(self, port: int, *, timeout: float | None = None,
                       address: str = "127.0.0.1") -> tuple[MemoryConnection, MemoryConnection]:
        self._connect()
        await asyncio.sleep(0)
        self.fleet.counts["tcp connect"] += 1
        for service in self.units.values():
            if service.cfg.port == port and service.listening:
                connection = MemoryConnection(partial(self._http, service), self.fleet.meter)
                return connection, connection
            if service.cfg.role == "prefill" and service.bootstrap_up and port == bootstrap_of(service):
                connection = MemoryConnection(lambda method, path, body: (404, b""), self.fleet.meter)
                return connection, connection
        raise ConnectionRefusedError(111, f"Connect call failed ('127.0.0.1', {port})")

    async def close(self) -> None:
        if self._connected and self._on_status is not None:
            self._on_status(self.name, "closed", "")
        self._connected = False

    def _connect(self) -> None:
        if not self._connected:
            self._connected = True
            if self._on_status is not None:
                self._on_status(self.name, "connected", f"memory:{self.name}")

    # -- systemctl -------------------------------------------------------------
    def _systemctl(self, args: list[str]) -> tuple[int, str, str]:
        verb, properties = args[0], list(SHOW_PROPERTIES)
        if "-p" in args:    # show -p A,B,C: the value is no unit
            at = args.index("-p")
            properties, args = args[at + 1].split(","), args[:at] + args[at + 2:]
        rest = [a for a in args[1:] if not a.startswith("-")]
        if verb == "show":
            return 0, "\n".join(self._show(unit, properties) for unit in rest), ""
        if verb == "cat":
            found = [f"# /etc/systemd/system/{unit}\n{text}" for unit in rest
                     if (text := self.fleet.unit_files.get((self.name, unit)))]
            return (0 if found else 1), "\n".join(found), ""
        if verb in ("start", "restart") or (verb == "enable" and "--now" in args):
            unknown = [unit for unit in rest if unit not in self.units]
            for unit in rest:
                if unit in self.units:
                    self._start(self.units[unit], again=verb == "restart")
            errors = "".join(f"Failed to {verb} {unit}: Unit {unit} not found.\n" for unit in unknown)
            return (5 if unknown else 0), "", errors
        if verb == "enable":     # what starts at boot: the fleet never reboots
            unknown = [unit for unit in rest if unit not in self.units]
            return (1 if unknown else 0), "", "".join(f"Failed to enable unit: Unit file {u} does not exist.\n"
                                                        for u in unknown)
        if verb == "reset-failed":
            for unit in rest:
                if unit in self.units and self.units[unit].active == "failed":
                    self.units[unit].active = "inactive"
            return 0, "", ""
        if verb in ("stop", "disable"):
            for unit in rest:
                if unit in self.units:
                    self._stop(self.units[unit])
            return 0, "", ""
        return 1, "", f"Unknown command verb '{verb}'."

    def _show(self, unit: str, properties: list[str]) -> str:
        service = self.units.get(unit)
        active = service.active if service else "inactive"
        values = {"Id": unit, "LoadState": "not-found" if service is None else "loaded", "ActiveState": active,
                  "SubState": {"active": "running", "failed": "failed"}.get(active, "dead"),
                  "MainPID": str(service.pid if service else 0), "NRestarts": "0",
                  "InvocationID": service.invocation if service else "",
                  "Result": "exit-code" if active == "failed" else "success",
                  "ExecMainCode": "1" if service and active != "active" and service.invocation else "0",
                  "ExecMainStatus": str(service.exit_status if service else 0),
                  "LimitMEMLOCK": "infinity", "User": ""}     # as pdtui renders its units
        return "".join(f"{p}={values.get(p, '')}\n" for p in properties)

    def _start(self, service: MemoryService, *, again: bool) -> None:
        if service.active == "active" and not again:
            return
        if service.active == "active":
            self._stop(service)
        service.active, service.invocation, service.pid = "active", uuid.uuid4().hex, next(_pids)
        service.started_at, service.ready_at, service.exit_status = time.perf_counter(), None, 0
        self._system(service, f"Started {service.unit} - {service.cfg.role} {service.cfg.name}.")
        steps = start_script(service, self.fleet.failures.get(service.cfg.name))
        self._play(service, asyncio.get_running_loop().time(), steps, 0)

    def _play(self, service: MemoryService, start: float, steps: tuple[Step, ...], at: int) -> None:
        """The steps of a start-up script now due, then one timer for the next: a thousand services' scripts
        as a thousand timers, not twenty thousand (the event loop's timer heap is the engine's too)."""
        with self.fleet.meter:
            loop = asyncio.get_running_loop()
            while at < len(steps) and start + steps[at][0] * service.startup <= loop.time():
                self._do(service, steps[at][1], steps[at][2])
                at += 1
            service.timer = None
            if at < len(steps):
                service.timer = loop.call_at(start + steps[at][0] * service.startup, self._play, service, start, steps, at)

    def _do(self, service: MemoryService, what: str, text: str) -> None:
        """One step of a start-up script (see :data:`~pdtui.sim.memservers.Step`)."""
        if what == "log":
            self.log(service, text)
        elif what.startswith("log TP"):
            self.log(service, text, " " + what.removeprefix("log "))
        elif what == "raw":
            self.journal.append(service.unit, service.invocation, text, pid=service.pid, comm="python3", system=False)
        elif what == "log pid":
            self.log(service, text.format(pid=service.pid))
        elif what == "set":
            setattr(service, text, True)
        elif what == "ready":
            service.ready_at = time.perf_counter()
        elif what == "activate":        # a router: its workers activated, then it is ready
            for _ in router_workers(self, service):
                self.log(service, text)
            service.healthy, service.ready_at = True, time.perf_counter()
        elif what == "exit":
            self._exited(service, int(text))

    def _exited(self, service: MemoryService, status: int) -> None:
        """Its process ended by itself: the unit fails, as systemd tells it."""
        invocation = service.invocation
        service.stop()
        service.active, service.exit_status, service.invocation = "failed", status, invocation
        self._system(service, f"{service.unit}: Main process exited, code=exited, status={status}/FAILURE")
        self._system(service, f"{service.unit}: Failed with result 'exit-code'.")

    def _stop(self, service: MemoryService) -> None:
        if service.active != "active":
            return
        service.stop()
        self._system(service, f"Stopping {service.unit} - {service.cfg.role} {service.cfg.name}...")
        self._system(service, f"{service.unit}: Deactivated successfully.")
        self._system(service, f"Stopped {service.unit} - {service.cfg.role} {service.cfg.name}.")

    def _system(self, service: MemoryService, message: str) -> None:
        self.journal.append(service.unit, service.invocation, message, pid=1, comm="systemd", system=True)

    def log(self, service: MemoryService, message: str, rank: str = "") -> None:
        """One line of the service's own."""
        self.journal.append(service.unit, service.invocation, f"{stamp(rank)} {message}", pid=service.pid,
                            comm="python3", system=False)

    # -- journalctl, nvidia-smi, sh ----------------------------------------------------
    def _journalctl(self, args: list[str]) -> tuple[int, str, str]:
        if "--lines=1" in args:
            return 0, self.journal.lines[-1].decode() + "\n", ""
        invocations = {a.partition("=")[2] for a in args if a.startswith("_SYSTEMD_INVOCATION_ID=")}
        return 0, self.journal.history(invocations), ""

    def gpu_use(self) -> list[tuple[int, int, int]]:
        """(index, MiB used, utilization %) of every GPU: a backend's GPUs are full once it runs."""
        held = {g for s in self.units.values() if s.active == "active" for g in s.cfg.gpus}
        return [(i, 130000 if i in held else 0, 35 if i in held else 0) for i in range(self.gpu_count)]

    def _bus_id(self, index: int) -> str:
        return f"00000000:{0x18 + index:02X}:00.0"

    def _nvidia_smi(self, args: list[str]) -> tuple[int, str, str]:
        if any(a.startswith("--query-gpu=") for a in args):
            return 0, "".join(f"{i}, GPU-{uuid.UUID(int=i).hex}, {GPU_NAME}, {self._bus_id(i)}, {used}, {GPU_MIB}, {util}\n"
                              for i, used, util in self.gpu_use()), ""
        if any(a.startswith("--query-compute-apps=") for a in args):
            return 0, "", ""
        return 1, "", "memory host: no such nvidia-smi query"

    def numa_of(self, index: int) -> int:
        """GPUs in the first half are on NUMA node 0, the rest on node 1 (an 8-GPU box)."""
        return 0 if index < self.gpu_count // 2 else 1

    def _sh(self, args: list[str]) -> tuple[int, str, str]:
        """pdtui's scripts: a start and the look after it; the preflight's fabric alone (an active NIC per GPU pair)
        and GPU inventory (nvidia-smi's GPUs and processes, the process table, then from sysfs the fabric and each
        GPU's NUMA node)."""
        script = args[2] if args[:1] == ["-c"] and len(args) > 2 else ""
        if script == START_AND_SHOW:
            status, _, err = self._systemctl(["start", *args[3:]])
            return status, self._systemctl(["show", "-p", ",".join(SHOW_PROPERTIES), *args[3:]])[1], err
        if script == "pdtui-fabric":
            return 0, FABRIC, ""
        if script == "pdtui-gpus":
            gpus = self._nvidia_smi(["--query-gpu=" + ",".join(QUERY_GPU_FIELDS)])[1]
            numa = "".join(f"bus/pci/devices/0000:{0x18 + i:02x}:00.0/numa_node:{self.numa_of(i)}\n"
                           for i in range(self.gpu_count))
            ps = "".join(f"{unit.pid} 1\n" for unit in self.units.values() if unit.active == "active")
            mark = args[4] if len(args) > 4 else MARK       # the script's $2
            return 0, f"{gpus}{mark} 0\n{mark} 0\n{ps}{mark} 0\n{FABRIC}{numa}", ""
        return 2, "", "memory host: no such script"

    # -- HTTP ------------------------------------------------------------------------
    def _http(self, service: MemoryService, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        self.fleet.counts[f"http {path}"] += 1
        return answer(self, service, method, path, body)
