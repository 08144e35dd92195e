"""The outcome's words every face shares: what came after the deployment was ready, and when.

A deployment ready at 1:34 whose decode failed at 3:46 did not fail its bring-up: the TUI's verdict, the headless
summary and ``status --once`` say ``ready at 1:34 · failed 2:12 later, at 3:46`` alike, each in its own clock.
"""

from __future__ import annotations

from pdtui.config.fields import format_elapsed


def since_ready(ready_at: float, what: str, at: float, *, seconds: bool = False) -> str:
    """``ready at 1:34 · failed 2:12 later, at 3:46`` (``seconds``: ``ready at 94.0s · failed 132.0s later, at
    226.0s``, as the headless lines show time). The time between is taken from the two times as shown, so that the
    three always agree."""
    if seconds:
        ready, then = round(ready_at, 1), round(at, 1)
        return f"ready at {ready:.1f}s · {what} {then - ready:.1f}s later, at {then:.1f}s"
    whole, later = int(ready_at), int(at)
    return f"ready at {format_elapsed(whole)} · {what} {format_elapsed(later - whole)} later, at {format_elapsed(later)}"
