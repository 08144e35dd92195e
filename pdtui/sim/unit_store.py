"""Unit files and unit state under a sandbox ROOT.

Layout (mirroring what systemd keeps, in one directory):
``ROOT/units/NAME.service`` the unit file (INI); ``ROOT/state/NAME.json`` the
runtime state the supervisor maintains, replaced atomically (tmp + rename) so a
reader never sees half a file; ``ROOT/enabled/NAME.service`` exists while the
unit is enabled (systemd's wants/ symlink); ``ROOT/state/NAME.lock`` serialises
start/stop of one unit across concurrent ``systemctl`` calls.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import time
from collections import namedtuple
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pdtui.sim.procs import ProcId

DEFAULT_STOP_TIMEOUT = 3.0
# systemd's defaults: RestartSec=100ms; DefaultStartLimitBurst=5 per DefaultStartLimitIntervalSec=10s.
DEFAULT_RESTART_SEC, DEFAULT_START_LIMIT_BURST, DEFAULT_START_LIMIT_INTERVAL = 0.1, 5, 10.0
DEFAULT_MEMLOCK = "8388608"     # systemd 252's DefaultLimitMEMLOCK (8 MiB), as show reports a unit without its own


def unit_name(name: str) -> str:
    """``name`` with the ``.service`` suffix systemctl assumes when none is given."""
    return name if "." in name else f"{name}.service"


class UnitFile(namedtuple("UnitFile", "name description argv env workdir stop_timeout restart restart_sec "
                                       "start_limit_burst start_limit_interval memlock user env_files",
                           defaults=("no", DEFAULT_RESTART_SEC, DEFAULT_START_LIMIT_BURST, DEFAULT_START_LIMIT_INTERVAL,
                                     DEFAULT_MEMLOCK, "", ()))):
    """What the sim uses of a unit file (a named tuple: no dataclasses import for a short-lived systemctl)."""

    __slots__ = ()
    name: str
    description: str
    argv: list[str]
    env: dict[str, str]
    workdir: str | None
    stop_timeout: float
    restart: str                    # Restart=: no, on-failure or always
    restart_sec: float
    start_limit_burst: int          # at most this many starts...
    start_limit_interval: float     # ...within this many seconds (0: no limit)
    memlock: str                    # LimitMEMLOCK= as systemctl show reports it: bytes, or infinity
    user: str                       # User= ('': root)
    env_files: tuple[str, ...]      # EnvironmentFile= values ('-PATH': optional), read at each start

    def start_env(self) -> dict[str, str]:
        """The environment a start gives: Environment=, then each EnvironmentFile= read now (its values win), as
        systemd reads them at every start; a missing file not marked optional raises OSError (the start fails)."""
        env = dict(self.env)
        for value in self.env_files:
            env.update(read_env_file(value))
        return env

    @property
    def title(self) -> str:
        """How PID-1 lines name the unit, as systemd 252 does: ``Started a.service - Its description.``, or
        ``Started a.service.`` without a description."""
        return f"{self.name} - {self.description}" if self.description else self.name


def parse_unit(name: str, text: str) -> UnitFile:
    """Parse the INI text of a unit file; keys may repeat (``Environment=``)."""
    keys = _parse_ini(text)
    env: dict[str, str] = {}
    for value in keys.get(("Service", "Environment"), []):
        for assignment in shlex.split(value):
            key, _, val = assignment.partition("=")
            env[key] = val
    exec_start = keys.get(("Service", "ExecStart"), [""])[-1]
    argv = shlex.split(exec_start)
    if argv:
        argv[0] = argv[0].lstrip("-@+!:")
    return UnitFile(
        name=name,
        description=keys.get(("Unit", "Description"), [""])[-1],
        argv=argv,
        env=env,
        workdir=keys.get(("Service", "WorkingDirectory"), [None])[-1],
        stop_timeout=_seconds(keys.get(("Service", "TimeoutStopSec"), [""])[-1], DEFAULT_STOP_TIMEOUT),
        restart=keys.get(("Service", "Restart"), ["no"])[-1],
        restart_sec=_seconds(keys.get(("Service", "RestartSec"), [""])[-1], DEFAULT_RESTART_SEC),
        start_limit_burst=_count(keys.get(("Unit", "StartLimitBurst"), [""])[-1], DEFAULT_START_LIMIT_BURST),
        start_limit_interval=_seconds(keys.get(("Unit", "StartLimitIntervalSec"), [""])[-1],
                                      DEFAULT_START_LIMIT_INTERVAL),
        memlock=_limit(keys.get(("Service", "LimitMEMLOCK"), [""])[-1], DEFAULT_MEMLOCK),
        user=keys.get(("Service", "User"), [""])[-1],
        env_files=tuple(keys.get(("Service", "EnvironmentFile"), [])),
    )


def read_env_file(value: str) -> dict[str, str]:
    """An ``EnvironmentFile=`` as systemd reads it at start: ``KEY=VALUE`` lines (``#``/``;`` comments), a value in
    double quotes taking a backslash before ``$``, a backquote, ``"`` or ``\\``, one in single quotes as it is. A
    ``-`` before the path: a missing file is no error; else a missing file fails the start (OSError)."""
    optional, path = value.startswith("-"), value.removeprefix("-")
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        if optional:
            return {}
        raise
    env = {}
    for line in text.splitlines():
        key, sep, raw = line.strip().partition("=")
        if not sep or key[:1] in ("#", ";"):
            continue
        raw = raw.strip()
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = re.sub(r'\\([$`"\\])', r"\1", raw[1:-1])
        elif len(raw) >= 2 and raw[0] == raw[-1] == "'":
            raw = raw[1:-1]
        env[key.strip()] = raw
    return env


def _parse_ini(text: str) -> dict[tuple[str, str], list[str]]:
    section = ""
    keys: dict[tuple[str, str], list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        key, sep, value = line.partition("=")
        if sep:
            keys.setdefault((section, key.strip()), []).append(value.strip())
    return keys


def _seconds(text: str, default: float) -> float:
    """A systemd time span (``10``, ``10s``, ``100ms``, ``1min``) in seconds; ``default`` when empty or unread."""
    match = _SPAN.fullmatch(text.strip())
    if match is None or not text.strip():
        return default
    return float(match[1]) * _SPAN_UNITS[match[2]]


_SPAN = re.compile(r"(\d+(?:\.\d*)?)\s*(us|ms|s|sec|min|m|h|)")
_SPAN_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "": 1.0, "min": 60.0, "m": 60.0, "h": 3600.0}


def _limit(text: str, default: str) -> str:
    """A resource limit (``infinity``, ``64M``, ``soft:hard``) as ``systemctl show`` reports it: the hard limit in
    bytes (1024-based suffixes), or ``infinity``; ``default`` when empty or unread."""
    hard = text.strip().rpartition(":")[2].strip()
    if hard == "infinity":
        return hard
    match = re.fullmatch(r"(\d+)\s*([KMGTPE]?)", hard)
    return str(int(match[1]) << (10 * " KMGTPE".index(match[2] or " "))) if match else default


def _count(text: str, default: int) -> int:
    return int(text) if text.strip().isdigit() else default


def render_unit(description: str, argv: list[str], env: dict[str, str] | None, workdir: str | None,
                stop_timeout: float | None = None, service: Sequence[str] = ()) -> str:
    """The text of a unit file for ``argv`` (the inverse of :func:`parse_unit`); ``service``: more lines of its
    [Service] section (``User=nobody``)."""
    lines = ["[Unit]", f"Description={description}", "", "[Service]", "Type=simple", f"ExecStart={shlex.join(argv)}",
             *service]
    lines += [f"Environment={shlex.quote(f'{k}={v}')}" for k, v in (env or {}).items()]
    if workdir:
        lines.append(f"WorkingDirectory={workdir}")
    if stop_timeout is not None:
        lines.append(f"TimeoutStopSec={stop_timeout:g}s")
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


class UnitState:
    """A unit's runtime state, as ``systemctl show`` reports it (and as its JSON state file holds it)."""

    __slots__ = ("active", "sub", "main_pid", "invocation", "exec_main_code", "exec_main_status", "result", "since_us",
                 "n_restarts", "supervisor", "child", "active_enter_us", "start_limit")

    def __init__(self, active: str = "inactive", sub: str = "dead", main_pid: int = 0, invocation: str = "",
                 exec_main_code: int = 0, exec_main_status: int = 0, result: str = "success", since_us: int = 0,
                 n_restarts: int = 0, supervisor: list[int] | None = None, child: list[int] | None = None,
                 active_enter_us: int = 0, start_limit: list[int] | None = None) -> None:
        self.active, self.sub, self.main_pid, self.invocation = active, sub, main_pid, invocation
        self.exec_main_code = exec_main_code
        """How its main process ended, as systemd's ExecMainCode: 1 exited, 2 killed, 3 dumped core (CLD_*)."""
        self.exec_main_status, self.result, self.since_us, self.n_restarts = exec_main_status, result, since_us, n_restarts
        self.supervisor = supervisor     # [pid, start ticks]
        self.child = child
        self.active_enter_us = active_enter_us
        """When the unit last became active: systemd's ActiveEnterTimestamp, kept once it is stopped or failed."""
        self.start_limit = start_limit
        """[when the start limit's window began (µs since the epoch), starts tried in it]; see :func:`take_start`."""

    def replaced(self, **changes: object) -> UnitState:
        """A copy with ``changes``."""
        return UnitState(**{**self.as_dict(), **changes})  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    def supervisor_proc(self) -> ProcId | None:
        return ProcId(*self.supervisor) if self.supervisor else None

    def child_proc(self) -> ProcId | None:
        return ProcId(*self.child) if self.child else None

    def running(self) -> bool:
        """True while this state's supervisor process is still there."""
        proc = self.supervisor_proc()
        return proc is not None and proc.alive()


def take_start(state: UnitState, unit: UnitFile) -> bool:
    """Count a start against the unit's start limit (StartLimitBurst= starts per StartLimitIntervalSec=); False
    when it is over and the start is refused. As systemd's, manual starts and Restart='s count alike, and
    ``reset-failed`` clears it."""
    if unit.start_limit_burst <= 0 or unit.start_limit_interval <= 0:
        return True
    now = time.time_ns() // 1000
    begin, tried = state.start_limit or (0, 0)
    if not begin or now - begin > unit.start_limit_interval * 1e6:
        begin, tried = now, 0
    state.start_limit = [begin, tried + 1]
    return tried < unit.start_limit_burst


class UnitStore:
    """The units of one sandbox ROOT."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.units_dir = self.root / "units"
        self.state_dir = self.root / "state"
        self.enabled_dir = self.root / "enabled"

    def unit_path(self, name: str) -> Path:
        return self.units_dir / unit_name(name)

    def load(self, name: str) -> UnitFile | None:
        """The parsed unit file, or None when there is no such unit."""
        try:
            text = self.unit_path(name).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return parse_unit(unit_name(name), text)

    def names(self) -> list[str]:
        return sorted(p.name for p in self.units_dir.glob("*.service"))

    def started_names(self) -> list[str]:
        """Units that have a state file, whether or not their unit file still exists."""
        return sorted(p.name.removesuffix(".json") for p in self.state_dir.glob("*.json"))

    def read_state(self, name: str) -> UnitState:
        try:
            data = json.loads((self.state_dir / f"{unit_name(name)}.json").read_text())
        except (FileNotFoundError, ValueError):
            return UnitState()
        return UnitState(**data)

    def write_state(self, name: str, state: UnitState) -> None:
        """Replace the state file atomically: readers see the old or the new one, never a mix."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / f"{unit_name(name)}.json"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state.as_dict()))
        os.replace(tmp, path)

    def is_enabled(self, name: str) -> bool:
        return (self.enabled_dir / unit_name(name)).exists()

    def set_enabled(self, name: str, enabled: bool) -> bool:
        """Enable or disable; True if that changed anything."""
        marker = self.enabled_dir / unit_name(name)
        if enabled == marker.exists():
            return False
        if enabled:
            self.enabled_dir.mkdir(parents=True, exist_ok=True)
            marker.touch()
        else:
            marker.unlink()
        return True

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold the unit's start/stop lock (an flock, released if the holder dies)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / f"{unit_name(name)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)
