"""Start-up phases as text: the panel's phase bar and the report's timeline share these words.

Pure functions of (phase, start time) pairs; the names and short labels are
engine/phases.py's.
"""

from __future__ import annotations

from pdtui.engine.phases import LABELS, durations


def took(seconds: float) -> str:
    """A phase's length, short: ``0.4s``, ``41s``, ``2m05s``, ``1h02m``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def phase_bar(starts: list[tuple[str, float | None]]) -> str:
    """One line: each phase begun so far with its duration (``weights 41s · kv 3.0s · graphs …``).

    The phase under way has no duration yet (``…``); the ready line ends the
    bar and is not shown itself. A phase whose start has no timestamp shows its
    label alone.
    """
    dated: list[tuple[str, float]] = [(name, at) for name, at in starts if at is not None]
    lengths = durations(dated)
    parts = []
    for index, (name, _) in enumerate(starts):
        if name == "ready":
            break
        label = LABELS.get(name, name)
        if name in lengths:
            parts.append(f"{label} {took(lengths[name])}")
        elif index == len(starts) - 1:
            parts.append(f"{label} …")
        else:
            parts.append(label)
    return " · ".join(parts)
