"""Keep Python's garbage collector from pausing the screen while logs stream in, and the heap lean.

The TUI tunes it for its lifetime; the headless faces too, for the bring-up's: at a thousand services the
default collector's full passes over the engine's objects cost 0.5-2 s of a bring-up (bench/fleet.py's gc_s),
tuned 0.15-0.4 s.

A full collection walks every tracked object: a running Textual app holds about
100,000 of them before the first log line, so each full pass holds the event loop
for 40-90 ms on a modest CPU, several times a second while strips are made and
dropped at 20 frames a second.  Two remedies, both undone when the app stops:

- once the screen is built, its objects are moved out of the collector's sight
  (:func:`gc.freeze`): they live as long as the app anyway;
- young collections run after 10,000 allocations instead of 700, so a frame's
  short-lived strips die by reference counting before any collection sees them,
  and far fewer survivors are promoted to trigger full collections.

A log burst also leaves the C heap holding freed memory (socket reads of 256 KiB
come and go); glibc gives it back only when asked, so the app asks now and then
(:meth:`QuietCollector.release`, ~2 ms; nothing on other C libraries).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable

YOUNG_THRESHOLD = 10_000
RELEASE_EVERY = 10.0
"""Seconds between two returns of freed heap memory to the system."""


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where there is no such call."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


class QuietCollector:
    """Tunes the collector for the app's lifetime; :meth:`restore` puts everything back."""

    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None
        self._trim = _malloc_trim()

    def start(self) -> None:
        if self._saved is None:
            self._saved = gc.get_threshold()
            _, middle, old = self._saved
            gc.set_threshold(YOUNG_THRESHOLD, middle, old)

    def settle(self) -> None:
        """Move what exists now (the built screen) out of the collector's walks."""
        gc.collect()
        gc.freeze()

    def release(self) -> None:
        """Give memory the C heap holds but no longer uses back to the system."""
        if self._trim is not None:
            self._trim(0)

    def restore(self) -> None:
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
        gc.unfreeze()
