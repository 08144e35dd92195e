"""Reading a sim sandbox's journal after the fact: when a unit started and when it said it was ready."""

from __future__ import annotations

import json
import re

from bench._common import READY_LINE
from pdtui.sim.journal import Journal
from pdtui.targets.systemd.journal_json import decode_field


def entries(sandbox) -> list[dict]:
    lines, _ = Journal(sandbox.root).read_lines(0)
    return [json.loads(line) for line in lines if line]


def own_startup(sandbox, unit: str, journal: list[dict] | None = None) -> tuple[float, float]:
    """(started, ready) epoch seconds of ``unit``'s last run: systemd's "Started" line and the ready line."""
    journal = entries(sandbox) if journal is None else journal
    t_start = _started(journal, unit)
    ready = [int(e["__REALTIME_TIMESTAMP"]) / 1e6 for e in journal
             if e.get("_SYSTEMD_UNIT") == unit and READY_LINE in str(e.get("MESSAGE", ""))]
    ready = [t for t in ready if t >= t_start]
    if not ready:
        raise RuntimeError(f"{unit} never logged its ready line")
    return t_start, ready[0]


def _started(journal: list[dict], unit: str) -> float:
    """When systemd last logged "Started" for ``unit`` (epoch seconds)."""
    started = [e for e in journal if e.get("UNIT") == unit and str(e.get("MESSAGE", "")).startswith("Started ")]
    if not started:
        raise RuntimeError(f"{unit} never started")
    return int(started[-1]["__REALTIME_TIMESTAMP"]) / 1e6


# sglang-router 0.3 (and the sim router): "Activated 1 worker(s) (marked as healthy)";
# smg 1.x: "Activated 1 of 1 worker(s) (others left as-is: ...)". One line per worker either way.
ACTIVATED = re.compile(r"Activated 1 (?:of 1 )?worker\(s\)")


def router_own_startup(sandbox, unit: str, workers: int, journal: list[dict] | None = None) -> tuple[float, float]:
    """(started, ready) epoch seconds of a router's last run: "Started" and its ``workers``-th "Activated" line.

    The router (smg, sglang-router and pdtui's sim router alike) logs an
    "Activated" line (:data:`ACTIVATED`) as it registers each worker; after the
    last one its ``/readiness`` answers 200. That span is the router's own
    start-up, as the ready line's is a worker's.
    """
    journal = entries(sandbox) if journal is None else journal
    t_start = _started(journal, unit)
    activated = [int(e["__REALTIME_TIMESTAMP"]) / 1e6 for e in journal
                 if e.get("_SYSTEMD_UNIT") == unit and ACTIVATED.search(decode_field(e.get("MESSAGE")))]
    activated = [t for t in activated if t >= t_start]
    if len(activated) < workers:
        raise RuntimeError(f"{unit} activated {len(activated)} of {workers} workers")
    return t_start, activated[workers - 1]
