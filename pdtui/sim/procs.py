"""Process identity and liveness by PID, safe against zombies and PID reuse.

The sim's supervisors are detached: their parent (a ``systemctl`` that has
exited) never reaps them, so a dead one may linger as a zombie, and a stale
PID in a state file may by now belong to another process.  A process is
therefore named by its PID *and* its start time from ``/proc``.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections import namedtuple


class ProcId(namedtuple("ProcId", "pid start")):
    """A PID together with the kernel's start time of that process (clock ticks since boot).

    A named tuple, not a dataclass: importing dataclasses (and inspect with it)
    would cost every sim ``systemctl`` run ~10 ms.
    """

    __slots__ = ()
    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcId | None:
        """The identity of a live process, or None when it is gone (or a zombie)."""
        fields = _stat_fields(pid)
        if fields is None or fields[0] in ("Z", "X"):
            return None
        return cls(pid, int(fields[19]))

    def alive(self) -> bool:
        """True while this very process runs (not a zombie, not a newcomer with the same PID)."""
        current = ProcId.of(self.pid)
        return current is not None and current.start == self.start


STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})   # what asks a supervisor to stop


def ident(pid: int) -> list[int] | None:
    """``[pid, start]`` of a live process, as state files keep it (None when it is gone)."""
    proc = ProcId.of(pid)
    return [proc.pid, proc.start] if proc else None


def running_with(needle: bytes) -> list[ProcId]:
    """Live processes whose command line (NUL-separated argv) contains ``needle``, this one excepted."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline and (proc := ProcId.of(int(entry.name))) is not None:
            found.append(proc)
    return found


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def signal_group(proc: ProcId, sig: int) -> None:
    """Send ``sig`` to the process group led by ``proc`` (each sim child leads its own)."""
    if not proc.alive():
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        _signal_one(proc, sig)


def _signal_one(proc: ProcId, sig: int) -> None:
    if not proc.alive():
        return
    try:
        os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_gone(proc: ProcId, timeout: float) -> bool:
    """Wait until ``proc`` has ended; True if it did within ``timeout`` seconds.

    Uses a pidfd (readable once the process ends, zombie or not) so the wait is
    an event, not a poll; falls back to polling /proc where pidfds are missing.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return _poll_gone(proc, timeout)
    try:
        if not proc.alive():
            return True
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready) or not proc.alive()
    finally:
        os.close(fd)


def _poll_gone(proc: ProcId, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while proc.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def terminate(proc: ProcId, grace: float, *, group: bool = False) -> None:
    """SIGTERM ``proc`` (or its group), then SIGKILL if it is still there after ``grace`` seconds."""
    send = signal_group if group else _signal_one
    send(proc, signal.SIGTERM)
    if not wait_gone(proc, grace):
        send(proc, signal.SIGKILL)
        wait_gone(proc, 5.0)
