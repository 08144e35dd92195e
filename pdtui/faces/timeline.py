"""Start-up phases as text: the panel's phase bar and the report's timeline share these words.

Pure functions of (phase, start time) pairs; the names, short labels and what
counts as slow are the server's serving engine's (:func:`pdtui.servers.serving_named`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pdtui.config.defaults import DEFAULT_ENGINE
from pdtui.config.fields import took
from pdtui.servers import serving_named


def slower(phase: str, seconds: float, last: float, *, engine: str = DEFAULT_ENGINE) -> str:
    """The warning's words: ``weights took 41s, 3.2× the last successful run's 13s`` (``engine``: the server's)."""
    label = serving_named(engine).phase_labels.get(phase, phase)
    return f"{label} took {took(seconds)}, {seconds / last:.1f}× the last successful run's {took(last)}"


def phase_bar(starts: list[tuple[str, float | None]], last: Mapping[str, float] | None = None,
              running: float | None = None, *, engine: str = DEFAULT_ENGINE) -> str:
    """One line: each phase begun so far with its duration (``weights 41s · kv 3.0s · graphs 2m10s…``).

    The phase under way shows how long it has run so far (``running`` seconds,
    ``…`` when unknown); the ready line ends the bar and is not shown itself. A
    phase whose start has no timestamp shows its label alone. With ``last``
    (the last successful run's durations), each phase says how long it took
    then: ``weights 41s (last 39s)``, and ``(last 13s, 3.2×)`` when it took, or
    has run, three times as long or more.
    """
    dated: list[tuple[str, float]] = [(name, at) for name, at in starts if at is not None]
    serving = serving_named(engine)
    lengths = serving.phase_durations(dated)
    parts = []
    for index, (name, _) in enumerate(starts):
        if name == "ready":
            break
        label = serving.phase_labels.get(name, name)
        if name in lengths:
            parts.append(f"{label} {took(lengths[name])}{_then(lengths[name], (last or {}).get(name), engine)}")
        elif index == len(starts) - 1 and running is not None:
            parts.append(f"{label} {took(running)}…{_then(running, (last or {}).get(name), engine)}")
        elif index == len(starts) - 1:
            parts.append(f"{label} …")
        else:
            parts.append(label)
    return " · ".join(parts)


def _then(seconds: float, last: float | None, engine: str) -> str:
    if last is None:
        return ""
    slow = serving_named(engine).slow(seconds, last)
    return f" (last {took(last)}, {seconds / last:.1f}×)" if slow else f" (last {took(last)})"


def finished(starts: list[tuple[str, float | None]]) -> tuple[str, float] | None:
    """The phase a new phase's start just ended, with its length (None when either has no timestamp)."""
    if len(starts) < 2 or starts[-1][1] is None or starts[-2][1] is None:
        return None
    (name, at), (_, after) = starts[-2], starts[-1]
    assert at is not None and after is not None
    return name, round(max(0.0, after - at), 3)
