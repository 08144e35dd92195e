"""systemctl and journalctl: argv builders and parsers of what they print (the journal's JSON: journal_json).

Every command is an argv list (never a shell string); a host's ``commands:``
wrappers and ``sudo`` are applied here, in one place.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pdtui.fabric.findings import MemoryLock

if TYPE_CHECKING:
    from pdtui.hosts.base import Result

START_AND_SHOW = "pdtui-start"
"""The name (``$0``) of the script that starts units and then looks at them (:meth:`Commands.start_and_show`)."""
SHOW_PROPERTIES = ("Id", "LoadState", "ActiveState", "SubState", "Result", "MainPID", "NRestarts", "InvocationID",
                   "ExecMainCode", "ExecMainStatus", "ActiveEnterTimestamp", "LimitMEMLOCK", "User")


@dataclass(frozen=True, slots=True)
class Commands:
    """How systemctl and journalctl are invoked on one host."""

    systemctl_prefix: tuple[str, ...] = ("systemctl",)
    journalctl_prefix: tuple[str, ...] = ("journalctl",)
    sudo: bool = False

    @classmethod
    def for_host(cls, host) -> Commands:
        """From a HostConfig (its ``commands`` mapping and ``sudo`` flag)."""
        return cls(tuple(host.commands["systemctl"]), tuple(host.commands["journalctl"]), host.sudo)

    def _wrap(self, prefix: tuple[str, ...], args: Iterable[str]) -> list[str]:
        return [*(("sudo", "-n") if self.sudo else ()), *prefix, *args]

    def systemctl(self, *args: str) -> list[str]:
        return self._wrap(self.systemctl_prefix, args)

    def journalctl(self, *args: str) -> list[str]:
        return self._wrap(self.journalctl_prefix, args)

    # -- systemctl verbs -------------------------------------------------
    def start(self, unit: str) -> list[str]:
        return self.systemctl("start", unit)

    def enable(self, unit: str) -> list[str]:
        return self.systemctl("enable", unit)

    def restart(self, unit: str) -> list[str]:
        return self.systemctl("restart", unit)

    def stop(self, unit: str) -> list[str]:
        return self.systemctl("stop", unit)

    def reset_failed(self, unit: str) -> list[str]:
        return self.systemctl("reset-failed", unit)

    def disable_now(self, unit: str) -> list[str]:
        return self.systemctl("disable", "--now", unit)

    def is_active(self, unit: str) -> list[str]:
        return self.systemctl("is-active", unit)

    def show(self, units: Sequence[str], properties: Sequence[str] = SHOW_PROPERTIES) -> list[str]:
        """Properties of one or more units: one command answers for all of a host's units."""
        return self.systemctl("show", "-p", ",".join(properties), *units)

    def start_and_show(self, units: Sequence[str], properties: Sequence[str] = SHOW_PROPERTIES) -> list[str]:
        """``systemctl start`` of units, then their properties, in one remote command (over SSH each command is a
        session and a login shell of its own, and the look always follows the start): the start's exit status and
        error lines, the look's properties on stdout. The units are the script's arguments, never pasted in."""
        start = shlex.join(self.systemctl("start"))
        show = shlex.join(self.systemctl("show", "-p", ",".join(properties)))
        return ["sh", "-c", f'{start} "$@"; status=$?; {show} "$@"; exit "$status"', START_AND_SHOW, *units]

    def cat(self, units: Sequence[str]) -> list[str]:
        """The installed files of units (each unit file, then its drop-ins)."""
        return self.systemctl("cat", "--no-pager", *units)

    def list_units(self) -> list[str]:
        """Every service unit systemd holds in memory, whatever its state: one plain row each."""
        return self.systemctl("list-units", "--all", "--type=service", "--no-legend", "--plain", "--no-pager")

    def list_unit_files(self) -> list[str]:
        """Every installed service unit file: a disabled unit nothing has started is not in memory, so
        :meth:`list_units` misses it."""
        return self.systemctl("list-unit-files", "--type=service", "--no-legend", "--no-pager")

    # -- journalctl --------------------------------------------------------
    def follow(self, units: Sequence[str], cursor: str | None = None, *, recent: float | None = None) -> list[str]:
        """One tail for several units: everything from a cursor on, from ``recent`` seconds ago, or from the start.

        ``--cursor``, not ``--after-cursor``: when the cursor's entry is gone (the
        journal was vacuumed), journalctl seeks to the nearest entry after it, and
        ``--after-cursor`` would then skip that one, a line never seen. The entry
        the cursor names, if it is still there, comes first: :class:`JournalTail`
        drops it. ``--no-tail`` always: journalctl 252 ``-f`` from a cursor on its
        last entry shows only 10 of the lines that arrive while it starts up.

        Never ``--lines=0``: journalctl 252 ``-f --lines=0 -u A`` started before A
        has any entry seeks to the end of nothing and shows only the last entry of
        A's first batch (a unit's 200 quick lines: 1 of 202 delivered, 4 of 4 runs
        on a real journald). ``--since=-Ns`` is read by the host's own clock, so a
        skewed clock here cannot move it; without cursor or ``recent`` the tail
        starts at the journal's head (for a journal that was empty).
        """
        if cursor:
            position = [f"--cursor={cursor}"]
        elif recent is not None:
            position = [f"--since=-{recent:g}s"]
        else:
            position = []
        return self.journalctl("--follow", "--output=json", "--all", "--no-pager", "--quiet",
                               *position, "--no-tail", *(f"--unit={u}" for u in units))

    def last_entry(self) -> list[str]:
        """The journal's newest entry, whatever it is about: where a first tail starts after."""
        return self.journalctl("--output=json", "--no-pager", "--quiet", "--lines=1")

    def invocation_history(self, invocations: Sequence[str], until: float | None = None) -> list[str]:
        """Every line so far of some invocations (up to the microsecond ``until``, inclusive, when given).

        Matches of one field are OR-ed, and ``+`` ORs two groups: the units' own
        lines (``_SYSTEMD_INVOCATION_ID``) and systemd's about them
        (``INVOCATION_ID``: its ``Started`` line, written before the unit's own,
        which a tail not yet live never saw). An invocation ID names one run of
        one unit.
        """
        bound = (f"--until=@{until:.6f}",) if until is not None else ()
        return self.journalctl("--output=json", "--all", "--no-pager", "--quiet", *bound,
                               *(f"_SYSTEMD_INVOCATION_ID={i}" for i in invocations), "+",
                               *(f"INVOCATION_ID={i}" for i in invocations))


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show -p ...`` output (KEY=VALUE lines) as a dict. The property names are interned: every unit's
    latest look is kept, and a fleet's thousand looks would each hold their own copies of the same eleven names."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[sys.intern(key.strip())] = value.strip()
    return props


def parse_show_units(text: str) -> dict[str, dict[str, str]]:
    """``systemctl show -p Id,... A B`` output (one block per unit, blank lines between) by unit Id."""
    units = {}
    for block in text.split("\n\n"):
        props = parse_show(block)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def memory_lock(props: Mapping[str, str]) -> MemoryLock | None:
    """How much memory the unit may pin, and as whom it runs (``LimitMEMLOCK=infinity`` or bytes, ``User=``);
    None when ``show`` did not say."""
    limit = props.get("LimitMEMLOCK", "")
    if limit == "infinity":
        return MemoryLock(None, props.get("User", ""))
    return MemoryLock(int(limit), props.get("User", "")) if limit.isdigit() else None


def parse_timestamp(text: str) -> float | None:
    """A timestamp as ``systemctl show`` prints it (``Tue 2026-12-01 15:05:21 UTC``), in seconds since the epoch.

    systemctl prints the host's own time zone by its abbreviation. UTC, GMT
    and zones known by that name are read; any other (``CEST``, say) gives
    None: the text is still shown, only the uptime is not computed.
    """
    match = _TIMESTAMP.search(text)
    if match is None:
        return None
    zone = _zone(match["zone"])
    if zone is None:
        return None
    moment = datetime.strptime(match["when"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=zone)
    return moment.timestamp()


_TIMESTAMP = re.compile(r"(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? (?P<zone>[A-Za-z][\w+/-]*)$")


def _zone(name: str) -> tzinfo | None:
    if name in ("UTC", "GMT", "Z"):
        return UTC
    if name in time.tzname:     # this machine's own zone: the common case of a host beside it
        return datetime.now().astimezone().tzinfo
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def parse_cat(text: str) -> dict[str, list[tuple[str, str]]]:
    """``systemctl cat A B`` output: each unit's files as (path, text), its unit file first, then drop-ins.

    systemctl puts ``# PATH`` before each file and a blank line between files; a
    drop-in (``NAME.service.d/x.conf``) belongs to ``NAME.service``.
    """
    files: dict[str, list[tuple[str, list[str]]]] = {}
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("# /"):
            path = line[2:].strip()
            parent, _, base = path.rpartition("/")
            folder = parent.rpartition("/")[2]
            unit = folder.removesuffix(".d") if folder.endswith(".d") else base
            current = []
            files.setdefault(unit, []).append((path, current))
        elif current is not None:
            current.append(line)
    return {unit: [(path, "".join(lines).rstrip("\n") + "\n") for path, lines in found] for unit, found in files.items()}


@dataclass(frozen=True, slots=True)
class ListedUnit:
    """One row of ``list-units`` (load and active state) or ``list-unit-files`` (file state)."""

    name: str
    load: str = ""          # loaded, not-found, masked, ...
    active: str = ""        # active, inactive, failed, ...
    file_state: str = ""    # enabled, disabled, static, masked, ...


_GLYPHS = ("\u25cf", "*")   # the mark before a failed or missing unit when --plain is not given


def parse_list_units(text: str) -> list[ListedUnit]:
    """``systemctl list-units --no-legend`` rows: UNIT LOAD ACTIVE SUB [JOB] DESCRIPTION.

    Only the first three columns are read: the description is free text and a
    JOB column appears only while some unit has a job.
    """
    rows = []
    for line in text.splitlines():
        words = line.split()
        if words and words[0] in _GLYPHS:
            words = words[1:]
        if len(words) >= 4 and "." in words[0]:
            rows.append(ListedUnit(words[0], load=words[1], active=words[2]))
    return rows


def parse_list_unit_files(text: str) -> list[ListedUnit]:
    """``systemctl list-unit-files --no-legend`` rows: UNIT-FILE STATE [PRESET]."""
    rows = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and "." in words[0]:
            rows.append(ListedUnit(words[0], file_state=words[1]))
    return rows


SUDO_PASSWORD_MARKERS = ("a password is required", "a terminal is required")


def why_it_failed(result: Result) -> str:
    """Why a ``systemctl`` command failed, in its own words: the ``Job for X failed because ...`` line where it
    printed one (its last lines only say what to type next), else what it said last."""
    for line in (result.stderr or "").splitlines():
        if line.startswith("Job for ") and " failed" in line:
            return line.strip()
    return result.last_words


def sudo_needs_password(stderr: str) -> bool:
    """True when ``sudo -n`` refused because it would have asked for a password."""
    return any(marker in stderr for marker in SUDO_PASSWORD_MARKERS)
