"""The sim's second journal: real journal files, written by systemd-journal-remote, read by the real journalctl.

When it is on (``ROOT/journal/real/`` exists), every entry the sim writes to its
JSONL journal is also sent, in systemd's Journal Export Format, to a
``systemd-journal-remote --output=ROOT/journal/real/NAME.journal -`` process:
one writer per :class:`pdtui.sim.journal.Journal` object (a supervisor has one
for the whole run of its unit, PID-1 lines included). Each writer gets a file of
its own; ``journalctl --directory`` merges them, in time order since all carry
this machine's boot ID and its monotonic clock. A writer records its PID under
``real/writers/`` so that :meth:`pdtui.sim.sandbox.Sandbox.stop_all` can stop
any left behind.

``journalctl -f`` follows the current boot only and exits 1 at once on a journal
without entries of it, so the sandbox writes one entry when it is created.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from pdtui.sim.procs import ProcId

ENV = "PDTUI_SIM_REAL_JOURNAL"
"""``1``: sandboxes use the real journal (it must be installed); ``0``: never; unset: when installed."""
JOURNAL_REMOTE_PATHS = ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
WRITE_TIMEOUT = 10.0
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


class Writer:
    """One systemd-journal-remote process writing ``real/NAME.journal`` from what it is sent."""

    def __init__(self, root: Path, name: str) -> None:
        directory = real_dir(root)
        program = journal_remote()
        if program is None:
            raise RuntimeError(missing_reason())
        safe = re.sub(r"[^A-Za-z0-9_.:-]", "_", name)
        self.path = directory / f"{safe}.journal"
        (directory / "writers").mkdir(parents=True, exist_ok=True)
        with open(directory / "writers.log", "ab") as log:
            self.proc = subprocess.Popen([program, f"--output={self.path}", "-"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        assert self.proc.stdin is not None
        self._fd = self.proc.stdin.fileno()
        ident = ProcId.of(self.proc.pid)
        self._pid_file = directory / "writers" / str(self.proc.pid)
        self._pid_file.write_text(f"{self.proc.pid} {ident.start if ident else 0}\n")
        self.sent = 0
        self.broken = False

    def write(self, data: bytes, count: int, wait: bool = False) -> None:
        """Send ``count`` encoded entries; with ``wait``, return once they are in the file.

        A writer that died (see ``writers.log``) loses what it is sent: the unit runs on.
        """
        if self.broken:
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            self.broken = True
            return
        self.sent += count
        if wait:
            self.wait_written()

    def written(self) -> int:
        try:
            with open(self.path, "rb") as f:
                f.seek(_N_ENTRIES)
                raw = f.read(8)
        except OSError:
            return 0
        return struct.unpack("<Q", raw)[0] if len(raw) == 8 else 0

    def wait_written(self, timeout: float = WRITE_TIMEOUT) -> bool:
        deadline = time.monotonic() + timeout
        delay = 0.0002
        while self.written() < self.sent:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        return True

    def close(self, timeout: float = WRITE_TIMEOUT) -> None:
        """End of input: journal-remote writes what it has and exits."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._pid_file.unlink(missing_ok=True)


def leftover_writers(root: Path) -> list[ProcId]:
    """Writers whose Journal was never closed (its process was killed, say) that still run."""
    found = []
    for path in (real_dir(root) / "writers").glob("*"):
        try:
            pid, start = (int(x) for x in path.read_text().split())
        except (OSError, ValueError):
            continue
        proc = ProcId(pid, start)
        if proc.alive():
            found.append(proc)
        else:
            path.unlink(missing_ok=True)
    return found
