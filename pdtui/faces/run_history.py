"""Run history: every bring-up and restart, kept in SQLite so the next one can be compared with it.

A subscriber like the printers: it learns everything from the engine's events
(never by reaching into the engine) and writes a run when its Done comes (a
retry's later Done rewrites the same run). The file is
``$XDG_STATE_HOME/pdtui/history.sqlite3`` (``~/.local/state`` when unset or not
absolute). A history that cannot be written never disturbs a bring-up: the
recorder keeps the error and goes on.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pdtui.config.defaults import DEFAULT_ENGINE
from pdtui.engine.events import (
    Done,
    Drained,
    Event,
    JobStatus,
    PhaseStarted,
    PlanReady,
    StateChanged,
    StepChanged,
    StepStatus,
    UnitStatus,
)
from pdtui.engine.states import ServiceState
from pdtui.servers import serving_named
from pdtui.support.private_files import private_file, private_folder

FILE_NAME = "history.sqlite3"
OUTCOMES = {ServiceState.READY: "ready", ServiceState.DEGRADED: "degraded", ServiceState.FAILED: "failed",
            ServiceState.TIMED_OUT: "timed out", ServiceState.BLOCKED: "blocked", ServiceState.STOPPED: "stopped"}
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, deployment TEXT NOT NULL, title TEXT NOT NULL, started REAL NOT NULL,
    elapsed REAL, ok INTEGER, exit_code INTEGER);
CREATE TABLE IF NOT EXISTS services (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, position INTEGER NOT NULL, name TEXT NOT NULL,
    role TEXT NOT NULL, host TEXT NOT NULL, unit TEXT NOT NULL, after TEXT NOT NULL, invocation TEXT NOT NULL,
    outcome TEXT NOT NULL, reason TEXT NOT NULL, started REAL, start_elapsed REAL, end_elapsed REAL,
    time_to_ready REAL, PRIMARY KEY (run, name));
CREATE TABLE IF NOT EXISTS phases (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, service TEXT NOT NULL, position INTEGER NOT NULL,
    phase TEXT NOT NULL, at REAL, duration REAL);
CREATE TABLE IF NOT EXISTS drains (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, position INTEGER NOT NULL, service TEXT NOT NULL,
    routers TEXT NOT NULL, outcome TEXT NOT NULL, idle_after REAL, cut INTEGER, out_for REAL, elapsed REAL NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
    run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, position INTEGER NOT NULL, step TEXT NOT NULL,
    status TEXT NOT NULL, detail TEXT NOT NULL, elapsed REAL NOT NULL);
"""


def history_path(env: Mapping[str, str] = os.environ) -> Path:
    """Where the history lives: the XDG state folder (``~/.local/state`` unless set to an absolute path)."""
    state = env.get("XDG_STATE_HOME", "")
    base = Path(state) if state and os.path.isabs(state) else Path(env.get("HOME") or Path.home()) / ".local/state"
    return base / "pdtui" / FILE_NAME


class HistoryError(Exception):
    """The history file cannot be read: one line says why."""


@dataclass
class ServiceRecord:
    """One service in one run: how it ended, and how long each start-up phase took."""

    name: str
    role: str
    host: str
    unit: str
    after: tuple[str, ...] = ()
    invocation: str = ""
    outcome: str = "pending"
    reason: str = ""
    started: float | None = None        # wall time of its start command
    start_elapsed: float | None = None  # the bring-up's elapsed at that start, and when it ended (ready or not)
    end_elapsed: float | None = None
    time_to_ready: float | None = None
    phases: list[tuple[str, float | None]] = field(default_factory=list)   # (phase, journal time it began)
    engine: str = DEFAULT_ENGINE        # the serving engine it ran, whose phases they are (not kept in the file)

    def durations(self) -> dict[str, float]:
        return serving_named(self.engine).phase_durations([(name, at) for name, at in self.phases if at is not None])


@dataclass
class RunRecord:
    """One bring-up or restart as the history keeps it."""

    deployment: str
    title: str
    started: float
    services: dict[str, ServiceRecord] = field(default_factory=dict)
    steps: list[tuple[str, str, str, float]] = field(default_factory=list)   # (step, status, detail, elapsed)
    drains: list[Drained] = field(default_factory=list)     # backends taken out of their routers, in order
    id: int | None = None
    elapsed: float | None = None
    ok: bool | None = None
    exit_code: int | None = None


def connect(path: Path, *, create: bool) -> sqlite3.Connection:
    """The history database; a missing one is made when ``create`` (else HistoryError, as for a broken one)."""
    if not create and not path.exists():
        raise HistoryError(f"no run history yet ({path})")
    try:
        if create:     # its owner's alone: it quotes journals (failure reasons)
            private_file(private_folder(path.parent) / path.name)
        db = sqlite3.connect(path)
        db.execute("PRAGMA foreign_keys = ON")
        db.executescript(SCHEMA)
    except (sqlite3.Error, OSError) as exc:
        raise HistoryError(f"cannot open the run history {path}: {exc}") from None
    return db


def save(db: sqlite3.Connection, run: RunRecord) -> int:
    """Write ``run`` (again, when it has an id): one transaction, the run and all it holds."""
    with db:
        if run.id is None:
            cursor = db.execute("INSERT INTO runs (deployment, title, started) VALUES (?, ?, ?)",
                                (run.deployment, run.title, run.started))
            assert cursor.lastrowid is not None
            run.id = cursor.lastrowid
        db.execute("UPDATE runs SET elapsed = ?, ok = ?, exit_code = ? WHERE id = ?",
                   (run.elapsed, None if run.ok is None else int(run.ok), run.exit_code, run.id))
        for table in ("services", "phases", "steps", "drains"):
            db.execute(f"DELETE FROM {table} WHERE run = ?", (run.id,))
        for position, s in enumerate(run.services.values()):
            db.execute("INSERT INTO services VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (run.id, position, s.name, s.role, s.host, s.unit, ",".join(s.after), s.invocation, s.outcome,
                        s.reason, s.started, s.start_elapsed, s.end_elapsed, s.time_to_ready))
            lengths = s.durations()
            db.executemany("INSERT INTO phases VALUES (?, ?, ?, ?, ?, ?)",
                           [(run.id, s.name, i, name, at, lengths.get(name)) for i, (name, at) in enumerate(s.phases)])
        db.executemany("INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?)",
                       [(run.id, i, *step) for i, step in enumerate(run.steps)])
        db.executemany("INSERT INTO drains VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [(run.id, i, d.service, ",".join(d.routers), d.outcome, d.idle_after, d.cut, d.out_for,
                         d.elapsed) for i, d in enumerate(run.drains)])
    return run.id


def load_runs(db: sqlite3.Connection, *, deployment: str | None = None, limit: int = 20,
              run_id: int | None = None) -> list[RunRecord]:
    """The newest runs first (of ``deployment`` when given), or the one run ``run_id``."""
    where: list[str] = []
    params: list[str | int] = []
    if deployment is not None:
        where.append("deployment = ?")
        params.append(deployment)
    if run_id is not None:
        where.append("id = ?")
        params.append(run_id)
    sql = ("SELECT id, deployment, title, started, elapsed, ok, exit_code FROM runs"
           + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC LIMIT ?")
    try:
        rows = db.execute(sql, (*params, limit)).fetchall()
        return [_load_run(db, row) for row in rows]
    except sqlite3.Error as exc:
        raise HistoryError(f"cannot read the run history: {exc}") from None


def _load_run(db: sqlite3.Connection, row: tuple) -> RunRecord:
    run_id, deployment, title, started, elapsed, ok, exit_code = row
    run = RunRecord(deployment, title, started, id=run_id, elapsed=elapsed,
                    ok=None if ok is None else bool(ok), exit_code=exit_code)
    for (name, role, host, unit, after, invocation, outcome, reason, s_started, start_elapsed, end_elapsed,
         ttr) in db.execute("SELECT name, role, host, unit, after, invocation, outcome, reason, started, start_elapsed,"
                            " end_elapsed, time_to_ready FROM services WHERE run = ? ORDER BY position", (run_id,)):
        run.services[name] = ServiceRecord(name, role, host, unit, tuple(a for a in after.split(",") if a), invocation,
                                           outcome, reason, s_started, start_elapsed, end_elapsed, ttr)
    for service, phase, at in db.execute("SELECT service, phase, at FROM phases WHERE run = ? ORDER BY service, "
                                         "position", (run_id,)):
        if service in run.services:
            run.services[service].phases.append((phase, at))
    run.steps = [tuple(r) for r in db.execute("SELECT step, status, detail, elapsed FROM steps WHERE run = ? "
                                              "ORDER BY position", (run_id,))]
    run.drains = [Drained(service, tuple(r for r in routers.split(",") if r), outcome, idle_after, cut, out_for, at)
                  for service, routers, outcome, idle_after, cut, out_for, at in db.execute(
                      "SELECT service, routers, outcome, idle_after, cut, out_for, elapsed FROM drains WHERE run = ? "
                      "ORDER BY position", (run_id,))]
    return run


def last_ready(path: Path, deployment: str, *, runs: int = 50) -> dict[str, dict[str, float]]:
    """Each service's phase durations in the newest recorded run where it became ready: what a bring-up's
    phases are compared with. Empty when there is no history (the file is never created here) or it cannot
    be read: a comparison is a nicety, never a reason to fail."""
    if not path.exists():
        return {}
    try:
        found = load_runs(connect(path, create=False), deployment=deployment, limit=runs)
    except (HistoryError, sqlite3.Error):
        return {}
    last: dict[str, dict[str, float]] = {}
    for run in found:                     # newest first
        for name, service in run.services.items():
            if name not in last and service.outcome == "ready" and service.durations():
                last[name] = service.durations()
    return last


class HistoryRecorder:
    """Subscribes to a bring-up and writes it to the history at its Done.

    A watch (``pdtui status``) and a take-down are not runs: nothing is
    started that could be timed. ``error`` holds why the history could not be
    written, if it could not.
    """

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path, self.clock = path, clock
        self.run: RunRecord | None = None
        self.error: str | None = None
        self.written = False
        self._elapsed = 0.0

    def __call__(self, event: Event) -> None:
        if isinstance(event, PlanReady):
            self._plan(event)
            return
        run = self.run
        if run is None:
            return
        self._elapsed = max(self._elapsed, event.elapsed)
        if isinstance(event, StateChanged) and event.service in run.services:
            self._state(run.services[event.service], event)
        elif isinstance(event, PhaseStarted) and event.service in run.services:
            run.services[event.service].phases.append((event.phase, event.at))
        elif isinstance(event, UnitStatus) and event.service in run.services and event.invocation:
            run.services[event.service].invocation = event.invocation
        elif isinstance(event, JobStatus) and event.service in run.services:
            run.services[event.service].invocation = event.job_id       # a job's id is its invocation
        elif isinstance(event, Drained):
            run.drains.append(event)
        elif isinstance(event, StepChanged) and event.status is not StepStatus.PENDING:
            run.steps.append((event.step.value, event.status.value, event.detail, event.elapsed))
        elif isinstance(event, Done):
            run.elapsed, run.ok, run.exit_code = event.elapsed, event.ok, event.exit_code
            self._write(run)

    def interrupted(self, exit_code: int) -> None:
        """The bring-up was interrupted before its outcome: record it so, each service as far as it got."""
        run = self.run
        if run is None or self.written:
            return
        for service in run.services.values():
            if service.outcome not in OUTCOMES.values():
                service.outcome, service.reason = "interrupted", f"interrupted while {service.outcome}"
                service.end_elapsed = self._elapsed
        run.elapsed, run.ok, run.exit_code = self._elapsed, False, exit_code
        self._write(run)

    def _plan(self, plan: PlanReady) -> None:
        if plan.watching or plan.title == "taking down":
            self.run = None
            return
        self.run = RunRecord(plan.deployment, plan.title, self.clock())
        for info in plan.services:
            self.run.services[info.name] = ServiceRecord(info.name, info.role, info.host, info.unit, info.after,
                                                         engine=info.engine)

    def _state(self, service: ServiceRecord, event: StateChanged) -> None:
        new = event.new
        if new is ServiceState.STARTING:
            service.started, service.start_elapsed, service.end_elapsed = self.clock(), event.elapsed, None
            service.phases.clear()
            service.time_to_ready = None
        elif new is ServiceState.WAITING and service.start_elapsed is None:
            service.start_elapsed = event.elapsed     # attached to a running unit
        if new in OUTCOMES:
            service.outcome, service.reason, service.end_elapsed = OUTCOMES[new], event.reason, event.elapsed
            if new is ServiceState.READY:
                service.time_to_ready = event.time_to_ready
        elif new is not ServiceState.PENDING:
            service.outcome = new.value

    def _write(self, run: RunRecord) -> None:
        try:
            db = connect(self.path, create=True)
            try:
                save(db, run)
                self.written = True
            finally:
                db.close()
        except (HistoryError, sqlite3.Error, OSError) as exc:
            self.error = str(exc)
