"""Reading a sim sandbox's journal after the fact: when a unit started and when it said it was ready."""

from __future__ import annotations

import json

from pdtui.sim.journal import Journal

from bench._common import READY_LINE


def entries(sandbox) -> list[dict]:
    lines, _ = Journal(sandbox.root).read_lines(0)
    return [json.loads(line) for line in lines if line]


def own_startup(sandbox, unit: str, journal: list[dict] | None = None) -> tuple[float, float]:
    """(started, ready) epoch seconds of ``unit``'s last run: systemd's "Started" line and the ready line."""
    journal = entries(sandbox) if journal is None else journal
    started = [e for e in journal if e.get("UNIT") == unit and str(e.get("MESSAGE", "")).startswith("Started ")]
    if not started:
        raise RuntimeError(f"{unit} never started")
    t_start = int(started[-1]["__REALTIME_TIMESTAMP"]) / 1e6
    ready = [int(e["__REALTIME_TIMESTAMP"]) / 1e6 for e in journal
             if e.get("_SYSTEMD_UNIT") == unit and READY_LINE in str(e.get("MESSAGE", ""))]
    ready = [t for t in ready if t >= t_start]
    if not ready:
        raise RuntimeError(f"{unit} never logged its ready line")
    return t_start, ready[0]
