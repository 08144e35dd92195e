"""``pdtui history`` and ``pdtui report``: the runs the history holds, and one run's timeline.

``report`` ends with the critical path, read the way ``systemd-analyze
critical-chain`` reads a boot: from the service that finished last back through
what it waited for, each with the moment it was ready (``@``) and how long its
own start took (``+``), and for a backend the phase that took longest.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TextIO

from pdtui.config.fields import took
from pdtui.engine.events import Drained
from pdtui.faces.run_history import HistoryError, RunRecord, ServiceRecord, connect, load_runs
from pdtui.support.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from pdtui.support.text import inert


def when(started: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))


def outcome(run: RunRecord) -> str:
    if run.ok is None:
        return "unfinished"
    if run.exit_code == EXIT_INTERRUPTED:
        return "interrupted"
    return "ready" if run.ok else "failed"


def drain_words(d: Drained) -> str:
    """A drain in a few words: how it ended, how long it was out, how long its requests took to finish."""
    ended = {"back": f"drained, back after {took(d.out_for)}" if d.out_for is not None else "drained, back",
             "stopped": "drained and stopped"}.get(d.outcome, f"drained, {d.outcome}")
    if d.idle_after is None:
        return ended
    cut = {0: "none cut", None: "cut unknown"}.get(d.cut, f"{d.cut} cut")
    if d.cut and d.cut_in_transfer:
        cut += f", {d.cut_in_transfer} in a KV transfer"
    return f"{ended} (idle after {took(d.idle_after)}, {cut})"


def history_line(run: RunRecord) -> str:
    """One run: when, deployment, outcome, each service's time to ready (or how it ended)."""
    parts = []
    for s in run.services.values():
        parts.append(f"{s.name} {took(s.time_to_ready)}" if s.time_to_ready is not None else f"{s.name} {s.outcome}")
    parts += [f"{d.service} {drain_words(d)}" for d in run.drains]
    title = "" if run.title == "bringing up" else f" ({run.title})"
    return inert(f"#{run.id}  {when(run.started)}  {run.deployment}{title}  {outcome(run)}  {' · '.join(parts)}", 2000)


def run_json(run: RunRecord) -> str:
    """One run as a JSON object: ``kind`` ``run``, its outcome, and each service's phases and their durations."""
    services = {s.name: {"role": s.role, "host": s.host, "unit": s.unit, "invocation": s.invocation,
                         "outcome": s.outcome, "reason": s.reason, "started": s.started,
                         "time_to_ready": s.time_to_ready, "phases": s.durations()}
                for s in run.services.values()}
    drains = [{"service": d.service, "routers": list(d.routers), "outcome": d.outcome, "idle_after": d.idle_after,
               "cut": d.cut, "out_for": d.out_for, "elapsed": d.elapsed} for d in run.drains]
    return json.dumps({"kind": "run", "id": run.id, "deployment": run.deployment, "title": run.title,
                       "started": run.started, "ok": run.ok, "exit_code": run.exit_code, "elapsed": run.elapsed,
                       "services": services, "drains": drains}, ensure_ascii=True)


def critical_path(run: RunRecord) -> list[ServiceRecord]:
    """The services the run waited for, the last to finish first, each the latest of what it waited for."""
    ended = [s for s in run.services.values() if s.end_elapsed is not None]
    if not ended:
        return []
    chain = [max(ended, key=lambda s: s.end_elapsed or 0.0)]
    while True:
        waited = [run.services[n] for n in chain[-1].after if n in run.services
                  and run.services[n].end_elapsed is not None and run.services[n] not in chain]
        if not waited:
            return chain
        chain.append(max(waited, key=lambda s: s.end_elapsed or 0.0))


def _service_lines(s: ServiceRecord) -> list[str]:
    head = f"ready in {took(s.time_to_ready)}" if s.time_to_ready is not None else s.outcome
    reason = f": {s.reason}" if s.reason and s.outcome != "ready" else ""
    lines = [f"{s.name}  {head}{reason}  ({s.role} on {s.host}, {s.unit}"
             + (f", invocation {s.invocation[:12]}" if s.invocation else "") + ")"]
    lengths = s.durations()
    for name, _ in s.phases:
        lines.append(f"    {name:<12} {took(lengths[name]) if name in lengths else ''}".rstrip())
    return lines


def _chain_lines(run: RunRecord) -> list[str]:
    lines = ["critical path (what the bring-up waited for):"]
    for depth, s in enumerate(critical_path(run)):
        at = f"@{took(s.end_elapsed)}" if s.end_elapsed is not None else ""
        own = (f" +{took(s.end_elapsed - s.start_elapsed)}"
               if s.end_elapsed is not None and s.start_elapsed is not None else "")
        lengths = s.durations()
        longest = max(lengths.items(), key=lambda kv: kv[1]) if lengths else None
        slowest = f", longest phase {longest[0]} {took(longest[1])}" if longest else ""
        lines.append(f"  {'└ ' * (depth > 0)}{'  ' * max(0, depth - 1)}{s.name} {s.outcome} {at}{own}{slowest}")
    return lines


def report_text(run: RunRecord) -> str:
    """One run's timeline: each service with its phases, the bring-up's steps, and the critical path."""
    total = f" in {took(run.elapsed)}" if run.elapsed is not None else ""
    lines = [f"run #{run.id}  {run.deployment}: {run.title}, {when(run.started)}, {outcome(run)}{total}", ""]
    for s in run.services.values():
        lines.extend(_service_lines(s))
    if run.steps:
        lines += ["", "steps:"]
        lines += [f"    @{took(elapsed):>7}  {step} {status}" + (f": {detail}" if detail else "")
                  for step, status, detail, elapsed in run.steps]
    if run.drains:
        lines += ["", "drains:"]
        lines += [f"    @{took(d.elapsed):>7}  {d.service} out of {', '.join(d.routers)}: {drain_words(d)}"
                  for d in run.drains]
    lines += ["", *_chain_lines(run)]
    return "\n".join(inert(line, 2000) for line in lines)


def history_command(path: Path, deployment: str | None, as_json: bool, limit: int, out: TextIO, err: TextIO) -> int:
    """Print the newest runs, one per line (newest first)."""
    try:
        db = connect(path, create=False)
        runs = load_runs(db, deployment=deployment, limit=limit)
    except HistoryError as exc:
        print(f"pdtui: {inert(str(exc))}", file=err)
        return EXIT_FAILED
    for run in runs:
        out.write((run_json(run) if as_json else history_line(run)) + "\n")
    if not runs and not as_json:
        print(f"pdtui: no runs{f' of {inert(deployment)}' if deployment else ''} in {inert(str(path))}", file=err)
    return EXIT_OK


def report_command(path: Path, run_id: str | None, as_json: bool, out: TextIO, err: TextIO) -> int:
    """Print one run's timeline (the newest when none is named)."""
    wanted = run_id.lstrip("#") if run_id else None
    if wanted is not None and not wanted.isdigit():
        print(f"pdtui: report: RUN is a run's number as history lists it (#12 or 12), not {run_id!r}", file=err)
        return EXIT_USAGE
    try:
        db = connect(path, create=False)
        runs = load_runs(db, run_id=None if wanted is None else int(wanted), limit=1)
    except HistoryError as exc:
        print(f"pdtui: {inert(str(exc))}", file=err)
        return EXIT_FAILED
    if not runs:
        print(f"pdtui: report: no run #{inert(str(wanted))} in {inert(str(path))}" if wanted
              else f"pdtui: no runs in {inert(str(path))}", file=err)
        return EXIT_FAILED
    out.write((run_json(runs[0]) if as_json else report_text(runs[0])) + "\n")
    return EXIT_OK
