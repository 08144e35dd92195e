"""Keep Python's garbage collector from pausing the screen while logs stream in.

A full collection walks every tracked object: a running Textual app holds about
100,000 of them before the first log line, so each full pass holds the event loop
for 40-90 ms on a modest CPU, several times a second while strips are made and
dropped at 20 frames a second.  Two remedies, both undone when the app stops:

- once the screen is built, its objects are moved out of the collector's sight
  (:func:`gc.freeze`): they live as long as the app anyway;
- young collections run after 10,000 allocations instead of 700, so a frame's
  short-lived strips die by reference counting before any collection sees them,
  and far fewer survivors are promoted to trigger full collections.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


class QuietCollector:
    """Tunes the collector for the app's lifetime; :meth:`restore` puts everything back."""

    def __init__(self) -> None:
        self._saved: tuple[int, int, int] | None = None

    def start(self) -> None:
        if self._saved is None:
            self._saved = gc.get_threshold()
            _, middle, old = self._saved
            gc.set_threshold(YOUNG_THRESHOLD, middle, old)

    def settle(self) -> None:
        """Move what exists now (the built screen) out of the collector's walks."""
        gc.collect()
        gc.freeze()

    def restore(self) -> None:
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None
        gc.unfreeze()
