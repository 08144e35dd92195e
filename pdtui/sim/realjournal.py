"""The sim's second journal: a real journal file, written by systemd-journal-remote, read by the real journalctl.

When it is on (``ROOT/journal/real/`` exists), the sandbox runs ONE
``systemd-journal-remote --split-mode=none --listen-raw=ROOT/jr.sock
--output=real/sandbox.journal``, as journald is one per machine. Every
:class:`pdtui.sim.journal.Journal` object (a supervisor has one for the whole
run of its unit, PID-1 lines included) connects to that socket and sends each
entry it writes to its JSONL journal there too, in Journal Export Format.

Why one file, in the order entries are stamped: ``journalctl`` merges several
files by their monotonic stamps, so an entry reaching its file after
later-stamped entries of another file is never shown by a ``journalctl -f``
already past them. In one file it shows entries in file order. journal-remote
keeps the stamps it is given (it stamps nothing itself), so a writer stamps its
entries under the sandbox-wide lock ``real/order``, which also holds the last
stamps and how many entries were sent: the next writer waits, before sending,
until journal-remote has written the entries of the one before (it reads each
connection on its own), so the file's stamps never go backwards.

A writer whose connection breaks loses its own unsent entries and says so on
stderr once; its unit runs on. ``Sandbox.stop_all`` stops journal-remote by PID
once it has written all it was sent; a writer that finds none running starts it
again (a sandbox is used again after ``stop_all``). Each start is a new
generation in ``real/order``: a writer connected to an older one connects again
before it sends, which is how a rotation (:func:`rotated`: the file closed,
archived or removed, a new one begun) reaches units that are running.

``journalctl -f`` follows the current boot only and exits 1 at once on a journal
without entries of it, so the sandbox writes one entry when it is created.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from pdtui.sim.procs import ProcId, terminate

ENV = "PDTUI_SIM_REAL_JOURNAL"
"""``1``: sandboxes use the real journal (it must be installed); ``0``: never; unset: when installed."""
JOURNAL_REMOTE_PATHS = ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
WRITE_TIMEOUT = 10.0
"""Longest wait for journal-remote: to accept a batch, to write what it was sent."""
START_TIMEOUT = 10.0
STOP_GRACE = 3.0
FILE = "sandbox.journal"
# At the sandbox's top, the path short: a socket's path holds 107 bytes at most, and a test's sandbox (or a machine
# beside it, ROOT/nodes/NAME) is deep in pytest's temporary folders.
SOCKET = "jr.sock"
_N_ENTRIES = 152
"""Offset of ``n_entries`` (le64) in a journal file's header: how far a writer has got."""


def journal_remote() -> str | None:
    return next((p for p in JOURNAL_REMOTE_PATHS if os.access(p, os.X_OK)), None)


def journalctl() -> str | None:
    """The machine's journalctl (never a sandbox's wrapper of the same name)."""
    for path in ("/usr/bin/journalctl", "/bin/journalctl"):
        if os.access(path, os.X_OK):
            return path
    return shutil.which("journalctl")


def available() -> bool:
    return journal_remote() is not None and journalctl() is not None


def missing_reason() -> str:
    if journal_remote() is None:
        return "systemd-journal-remote is not installed (apt-get install systemd-journal-remote)"
    return "journalctl is not installed"


def wanted(explicit: bool | None = None) -> bool:
    """Whether a new sandbox uses the real journal: ``explicit``, else $PDTUI_SIM_REAL_JOURNAL, else if installed."""
    if explicit is not None:
        return explicit
    env = os.environ.get(ENV, "")
    if env in ("0", "1"):
        return env == "1"
    return available()


def real_dir(root: Path) -> Path:
    return Path(root) / "journal" / "real"


def enabled(root: Path) -> bool:
    return real_dir(root).is_dir()


_BINARY = re.compile(rb"[\x00-\x08\x0a-\x1f]")
"""Bytes that make a value go in the binary form (newline above all; control bytes to be safe)."""


def export_field(name: bytes, value: bytes) -> bytes:
    """One field in Journal Export Format: ``NAME=value\\n``, or NAME, a le64 size and the raw bytes."""
    if _BINARY.search(value) is None:
        return name + b"=" + value + b"\n"
    return name + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"


def export_entry(fields: Mapping[str, str | bytes | list[int]]) -> bytes:
    """One entry, its fields in order, ended by the empty line."""
    parts = []
    for name, value in fields.items():
        if isinstance(value, str):
            raw = value.encode("utf-8")
        elif isinstance(value, list):
            raw = bytes(value)
        else:
            raw = value
        parts.append(export_field(name.encode("utf-8"), raw))
    parts.append(b"\n")
    return b"".join(parts)


def socket_path(root: Path) -> Path:
    return root / SOCKET


def journal_file(root: Path) -> Path:
    return real_dir(root) / FILE


def written(root: Path) -> int:
    """How many entries journal-remote has written to the file (its header's ``n_entries``)."""
    try:
        with open(journal_file(root), "rb") as f:
            f.seek(_N_ENTRIES)
            raw = f.read(8)
    except OSError:
        return 0
    return struct.unpack("<Q", raw)[0] if len(raw) == 8 else 0


def wait_written(root: Path, count: int, timeout: float = WRITE_TIMEOUT) -> bool:
    """Until ``count`` entries are in the file; False on timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.0001
    while written(root) < count:
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.005)
    return True


_STATE = struct.Struct("<QQQQQ")
"""``real/order``: the last (realtime, monotonic) stamps, entries sent, the last sender's id, and the
generation of the running journal-remote (one more each time one is started)."""


class Order:
    """The sandbox-wide order of entries: held while a writer stamps, appends and sends a batch."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._fd = os.open(real_dir(root) / "order", os.O_RDWR | os.O_CREAT, 0o644)
        self.real = self.mono = self.sent = self.sender = self.generation = 0

    @contextmanager
    def held(self) -> Iterator[Order]:
        """The lock every writer holds to stamp and send; always taken before the journal-remote lock."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(self._fd, _STATE.size, 0)
            self.real, self.mono, self.sent, self.sender, self.generation = (
                _STATE.unpack(raw) if len(raw) == _STATE.size else (0, 0, 0, 0, 0))
            yield self
            os.pwrite(self._fd, _STATE.pack(self.real, self.mono, self.sent, self.sender, self.generation), 0)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def stamps(self, count: int) -> list[tuple[int, int]]:
        """(realtime, monotonic) in µs for ``count`` new entries, each after the last of any writer."""
        real = max(time.time_ns() // 1000, self.real + 1)
        mono = max(time.monotonic_ns() // 1000, self.mono + 1)
        out = [(real + i, mono + i) for i in range(count)]
        self.real, self.mono = out[-1]
        return out

    def close(self) -> None:
        os.close(self._fd)


@contextmanager
def _order_held(root: Path) -> Iterator[Order]:
    """The sandbox's order, opened and held for one use by a process that is not a writer."""
    order = Order(root)
    try:
        with order.held():
            yield order
    finally:
        order.close()


def _stamped(stamps: Sequence[tuple[int, int]], exported: Sequence[bytes]) -> bytes:
    return b"".join(b"__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n%s" % (r, m, x)
                    for (r, m), x in zip(stamps, exported, strict=False))


class Writer:
    """One process's connection to the sandbox's journal-remote, made again when another one runs."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.id = random.getrandbits(63) | 1
        self.order = Order(root)
        self.broken = False
        self.target = 0
        """Entries in the file once this writer's last batch is written."""
        self.generation = -1
        self._sock: socket.socket | None = None
        with self.order.held() as order:    # connected (journal-remote started if none runs) from the start
            self._connect(order)

    def _connect(self, order: Order) -> None:
        """Connect to the journal-remote running now (``order`` held), starting one if none does."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for attempt in range(2):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(WRITE_TIMEOUT)
            try:
                sock.connect(str(socket_path(self.root)))
            except OSError as exc:
                sock.close()
                if attempt:
                    self._break(f"cannot reach the sandbox's journal-remote at {socket_path(self.root)} ({exc})")
                    return
                ensure_remote(self.root, order)     # none runs (stop_all stopped it): start it again
                continue
            self._sock, self.generation = sock, order.generation
            return

    def _break(self, reason: str) -> None:
        self.broken = True
        print(f"pdtui sim: {reason}: entries of this writer from now on are not in the real journal "
              f"(journal-remote's log: {real_dir(self.root) / 'remote.log'})", file=sys.stderr, flush=True)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def send(self, order: Order, stamps: Sequence[tuple[int, int]], exported: Sequence[bytes]) -> None:
        """Send a stamped batch, within ``order.held()``, after journal-remote wrote the last sender's."""
        if self.broken:
            return
        if self._sock is None or self.generation != order.generation:
            self._connect(order)        # the journal was rotated, or journal-remote stopped: the one running now
            if self._sock is None:
                return
        if order.sender != self.id and not wait_written(self.root, order.sent, 2.0):
            order.sent = written(self.root)   # journal-remote lost some (restarted, say): count from its file
        try:
            self._sock.sendall(_stamped(stamps, exported))
        except OSError as exc:
            self._break(f"the sandbox's journal-remote is gone ({exc})")
            return
        order.sent += len(stamps)
        order.sender = self.id
        self.target = order.sent

    def wait_written(self, timeout: float = WRITE_TIMEOUT) -> bool:
        """Until this writer's entries are in the file (a reader started next sees them)."""
        return self.broken or wait_written(self.root, self.target, timeout)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.order.close()


def _remote_pid(root: Path) -> ProcId | None:
    try:
        pid, start = (int(x) for x in (real_dir(root) / "remote.pid").read_text().split())
    except (OSError, ValueError):
        return None
    proc = ProcId(pid, start)
    return proc if proc.alive() else None


@contextmanager
def _remote_lock(root: Path) -> Iterator[None]:
    fd = os.open(real_dir(root) / "remote.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


_started: list[subprocess.Popen[bytes]] = []
"""journal-remotes this process started, reaped once stopped."""


def ensure_remote(root: Path, order: Order | None = None) -> ProcId:
    """The sandbox's journal-remote, started if none runs; RuntimeError if it does not come up.

    ``order``: the sandbox's order, when the caller holds it already (locks are
    always taken in one order: the writers' order, then journal-remote's).
    """
    if order is None:
        with _order_held(root) as own:
            return ensure_remote(root, own)
    with _remote_lock(root):
        return _remote_pid(root) or _start_remote(root, order)


def _start_remote(root: Path, order: Order) -> ProcId:
    """Start journal-remote on the sandbox's file (both locks held); a new generation of the order."""
    program = journal_remote()
    if program is None:
        raise RuntimeError(missing_reason())
    directory = real_dir(root)
    sock = socket_path(root)
    sock.unlink(missing_ok=True)
    with open(directory / "remote.log", "ab") as log:
        proc = subprocess.Popen([program, "--split-mode=none", f"--listen-raw={sock}",
                                 f"--output={journal_file(root)}"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True, close_fds=True)
    _started.append(proc)
    ident = ProcId.of(proc.pid)
    (directory / "remote.pid").write_text(f"{proc.pid} {ident.start if ident else 0}\n")
    deadline = time.monotonic() + START_TIMEOUT
    while not _accepts(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log_text = (directory / "remote.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"systemd-journal-remote did not start: {log_text.strip()}")
        time.sleep(0.002)
    order.sent, order.sender, order.generation = written(root), 0, order.generation + 1
    return ident or ProcId(proc.pid, 0)


def _accepts(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def stop_remote(root: Path, timeout: float = WRITE_TIMEOUT) -> None:
    """Stop the sandbox's journal-remote by PID once it has written everything it was sent."""
    if not real_dir(root).is_dir():
        return
    with _order_held(root) as order, _remote_lock(root):
        _stop_remote(root, order, timeout)
    for popen in list(_started):
        if popen.poll() is not None:
            _started.remove(popen)


def _stop_remote(root: Path, order: Order, timeout: float) -> None:
    """Stop it (both locks held); a writer still connected to it breaks, one made later starts another."""
    proc = _remote_pid(root)
    if proc is not None:
        wait_written(root, order.sent, timeout)
        terminate(proc, STOP_GRACE)
    (real_dir(root) / "remote.pid").unlink(missing_ok=True)
    socket_path(root).unlink(missing_ok=True)


@contextmanager
def rotated(root: Path) -> Iterator[Path]:
    """Rotate the real journal as journald does: the active file is closed and a new one started.

    Yields the closed file (its caller archives or removes it) while no writer
    can send; every writer sends to the new journal-remote after.
    """
    with _order_held(root) as order, _remote_lock(root):
        _stop_remote(root, order, WRITE_TIMEOUT)
        yield journal_file(root)
        _start_remote(root, order)


def remote_running(root: Path) -> ProcId | None:
    return _remote_pid(root)
