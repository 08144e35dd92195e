"""``python -m pdtui.sim.journalctl [--root ROOT] [OPTIONS] [FIELD=VALUE...]``: journalctl for a sandbox.

Speed matters (a backend may log 10,000 lines a second and pdtui follows it
live), so matching is a substring search on the stored lines (see
:mod:`pdtui.sim.journal` for why that is exact) and ``-o json`` passes stored
lines through untouched unless a field must become ``null``.  With ``-f`` it
polls the file every 20 ms and writes each batch with one ``write``. Like
journalctl it dies of SIGTERM and SIGINT (no handler), and exits 1 on a broken
pipe or a closed stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from pdtui.sim.journal import THRESHOLD, CursorError, Journal, encode_value, too_long, value_bytes
from pdtui.sim.unit_store import unit_name

ROOT_ENV = "PDTUI_SIM_ROOT"
FOLLOW_POLL = 0.02
OUTPUTS = ("json", "cat", "short")


class Usage(Exception):
    """Bad command line: one line for stderr, exit 1 like journalctl."""


NO_BOOT = "Data from the specified boot (+0) is not available: No such boot ID in journal"
"""What ``journalctl -f`` (which implies ``--boot``) says on a journal without entries, exiting 1."""


class Failure(Exception):
    """An error journalctl states as it is (no ``journalctl:`` prefix) and exits 1."""


class NoEntries(Failure):
    """``-f`` on a journal without entries: journalctl exits 1 at once."""


class Matcher:
    """Which stored lines an invocation selects: ``-u`` units OR-ed, AND each FIELD=VALUE group; ``+`` between
    matches ORs what comes before it with what comes after, as journalctl's disjunction."""

    def __init__(self, units: list[str], matches: list[str]) -> None:
        self.units = [self._needles(u) for u in units]
        self.alternatives: list[list[list[bytes]]] = []
        groups: dict[str, list[bytes]] = {}
        for match in [*matches, "+"]:
            if match == "+":
                self.alternatives.append(list(groups.values()))
                groups = {}
                continue
            field, sep, value = match.partition("=")
            if not sep or not field:
                raise Usage(f'Failed to add match \'{match}\': Invalid argument')
            groups.setdefault(field, []).append(_pair(field, value))

    @staticmethod
    def _needles(unit: str) -> tuple[bytes, bytes]:
        name = unit_name(unit)
        return _pair("_SYSTEMD_UNIT", name), _pair("UNIT", name)

    def __call__(self, line: bytes) -> bool:
        if self.units and not any(own in line or (pid1 in line and _PID1 in line) for own, pid1 in self.units):
            return False
        return any(all(any(n in line for n in group) for group in groups) for groups in self.alternatives)


_PID1 = b'"_PID":"1"'


def _pair(field: str, value: str) -> bytes:
    return b'"' + field.encode("utf-8") + b'":' + encode_value(value)


def renderer(output: str, show_all: bool) -> Callable[[bytes], bytes]:
    """A function from a stored line to the bytes to print for it (newline included)."""
    if output == "json":
        return lambda line: _render_json(line, show_all)
    if output == "cat":
        return lambda line: value_bytes(json.loads(line).get("MESSAGE")) + b"\n"
    return lambda line: _render_short(json.loads(line), show_all)


def _render_json(line: bytes, show_all: bool) -> bytes:
    if show_all or len(line) < THRESHOLD:   # a field that long makes a longer line
        return line + b"\n"
    entry = json.loads(line)
    for key, value in entry.items():
        if too_long(key, value):
            entry[key] = None
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _render_short(entry: dict, show_all: bool) -> bytes:
    """``MMM DD HH:MM:SS HOST IDENT[PID]: MESSAGE``, with unprintable text as ``[N blob data]``."""
    stamp = time.strftime("%b %d %H:%M:%S", time.localtime(int(entry.get("__REALTIME_TIMESTAMP", "0")) / 1e6))
    message = entry.get("MESSAGE")
    if isinstance(message, list) and not show_all:
        text = f"[{len(message)}B blob data]".encode()
    else:
        text = value_bytes(message)
    head = f"{stamp} {entry.get('_HOSTNAME', 'localhost')} {entry.get('SYSLOG_IDENTIFIER', '')}[{entry.get('_PID', '')}]: "
    return head.encode("utf-8") + text + b"\n"


class Output:
    """Writes to fd 1 with ``os.write`` (no buffer to flush at exit)."""

    def __init__(self) -> None:
        self.fd = sys.stdout.fileno()

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def wait_closed(self, timeout: float) -> bool:
        """Sleep up to ``timeout``; True as soon as the reader of stdout has gone away."""
        poller = select.poll()
        poller.register(self.fd, 0)   # POLLERR/POLLHUP are always reported
        return bool(poller.poll(timeout * 1000))


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(prog="journalctl", add_help=False)
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("-u", "--unit", action="append", default=[])
    parser.add_argument("-o", "--output", default="short")
    parser.add_argument("-a", "--all", action="store_true")
    parser.add_argument("-f", "--follow", action="store_true")
    parser.add_argument("-n", "--lines", nargs="?", const="10", default=None)
    parser.add_argument("--after-cursor", default=None)
    parser.add_argument("--cursor", default=None)
    parser.add_argument("--no-pager", action="store_true")
    parser.add_argument("--no-tail", action="store_true")
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("-g", "--grep", default=None)
    parser.add_argument("--case-sensitive", nargs="?", const="true", default=None)
    parser.add_argument("-S", "--since", default=None)
    parser.add_argument("-U", "--until", default=None)
    parser.add_argument("matches", nargs="*")
    args = parser.parse_intermixed_args(argv)
    if args.output not in OUTPUTS:
        raise Failure(f"Unknown output format '{args.output}'.")
    args.lines = _lines(args)
    args.grep = _grep(args)
    args.window = _window(args)
    args.content = _content(args.window, args.grep)
    return args


def _content(*tests: Callable[[dict], bool] | None) -> Callable[[bytes], bool]:
    """One predicate for the filters that look inside an entry (its time, its MESSAGE): each line parsed once."""
    wanted = [test for test in tests if test is not None]
    if not wanted:
        return lambda line: True

    def content(line: bytes) -> bool:
        entry = json.loads(line)
        return all(test(entry) for test in wanted)

    return content


def _window(args: argparse.Namespace) -> Callable[[dict], bool] | None:
    """``--since``/``--until``, in the forms pdtui writes them: ``@SECONDS`` since the epoch (to the microsecond,
    inclusive), or ``-SECONDSs``, that long before now."""
    since, until = (_timestamp(text) for text in (args.since, args.until))
    if since is None and until is None:
        return None

    def within(entry: dict) -> bool:
        stamp = int(entry.get("__REALTIME_TIMESTAMP", "0"))
        return (since is None or stamp >= since) and (until is None or stamp <= until)

    return within


_AGO = re.compile(r"-(\d+(?:\.\d+)?)s")


def _timestamp(text: str | None) -> int | None:
    """A ``--since``/``--until`` value in microseconds since the epoch; None when not given."""
    if text is None:
        return None
    try:
        if text.startswith("@"):
            return int(Decimal(text[1:]) * 1_000_000)   # exact: a float would be a microsecond off now and then
    except (ArithmeticError, ValueError):   # not a number, or NaN
        pass
    ago = _AGO.fullmatch(text)
    if ago:
        return int((time.time() - float(ago[1])) * 1e6)
    raise Failure(f"Failed to parse timestamp: {text}")


def _grep(args: argparse.Namespace) -> Callable[[dict], bool] | None:
    """``--grep``: MESSAGE matches the pattern; as journalctl, a pattern without capitals ignores case unless
    ``--case-sensitive`` says otherwise."""
    if args.grep is None:
        return None
    if args.case_sensitive not in (None, "true", "yes", "1", "false", "no", "0"):
        raise Usage(f"Bad --case-sensitive= argument '{args.case_sensitive}'.")
    sensitive = args.case_sensitive in ("true", "yes", "1") if args.case_sensitive is not None \
        else args.grep != args.grep.lower()
    try:
        pattern = re.compile(args.grep, 0 if sensitive else re.IGNORECASE)
    except re.error as exc:
        raise Usage(f"Bad pattern \"{args.grep}\": {exc}") from None

    def matches(entry: dict) -> bool:
        message = entry.get("MESSAGE")
        if isinstance(message, list):       # not printable (ANSI colours, say): journalctl greps its text all the same
            message = bytes(message).decode("utf-8", errors="replace")
        return isinstance(message, str) and pattern.search(message) is not None

    return matches


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:   # type: ignore[override]
        raise Usage(message)


def _lines(args: argparse.Namespace) -> int | None:
    """How many of the last matching entries to show first; None for all."""
    if args.lines is None:
        starts = (args.after_cursor, args.cursor, args.since)
        return 10 if args.follow and not args.no_tail and all(a is None for a in starts) else None
    if args.lines == "all":
        return None
    try:
        count = int(args.lines)
    except ValueError:
        raise Usage(f"Failed to parse lines '{args.lines}'.") from None
    if count < 0:
        raise Usage(f"Failed to parse lines '{args.lines}'.")
    return count


def run(journal: Journal, args: argparse.Namespace, out: Output) -> int:
    """Print the selected entries, then (``-f``) keep printing new ones until stopped; the exit status."""
    match = Matcher(args.unit, args.matches)
    render = renderer(args.output, args.all)
    start = 0
    skip_first = False
    cursor = args.after_cursor if args.after_cursor is not None else args.cursor
    if cursor is not None:
        # journalctl 252 skips one entry after an --after-cursor seek, even when its entry was gone
        start, skip_first = journal.seek(cursor)[0], args.after_cursor is not None
    file_state = journal.file_state()
    if args.follow and (file_state is None or file_state[1] == 0):
        raise NoEntries(NO_BOOT)
    lines, offset = journal.read_lines(start)
    if skip_first:
        lines = lines[1:]
    selected = [line for line in lines if line and match(line) and args.content(line)]
    if args.lines is not None and cursor is None:
        selected = selected[-args.lines:] if args.lines else []
    _emit(out, render, selected)
    if not selected and not args.follow and not args.quiet and args.output == "short":
        out.write(b"-- No entries --\n")
    if not selected and not args.follow and args.grep is not None:
        return 1     # journalctl 252: a --grep that matched nothing exits 1, saying nothing
    while args.follow:
        offset, file_state = _after_rotation(journal, offset, file_state)
        lines, offset = journal.read_lines(offset)
        selected = [line for line in lines if line and match(line) and args.content(line)]
        if selected:
            _emit(out, render, selected)
        elif out.wait_closed(FOLLOW_POLL):
            return 1
    return 0


def _after_rotation(journal: Journal, offset: int, seen: tuple[int, int] | None) -> tuple[int, tuple[int, int] | None]:
    """Where to read next: a journal file replaced (rotated) or cut short (vacuumed) is followed from its start."""
    now = journal.file_state()
    if now is None:
        return offset, seen
    if seen is None or now[0] != seen[0] or now[1] < offset:
        return 0, now
    return offset, now


def _emit(out: Output, render: Callable[[bytes], bytes], lines: list[bytes]) -> None:
    if lines:
        out.write(b"".join(map(render, lines)))


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        args = _parse(sys.argv[1:] if argv is None else argv)
        root = args.root or (Path(os.environ[ROOT_ENV]) if os.environ.get(ROOT_ENV) else None)
        if root is None:
            raise Usage(f"no sandbox: pass --root ROOT or set {ROOT_ENV}")
        return run(Journal(root), args, Output())
    except Usage as exc:
        print(f"journalctl: {exc}", file=sys.stderr)
        return 1
    except (CursorError, Failure) as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
