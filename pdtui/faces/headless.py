"""The headless face: engine events as human lines or as JSON lines.

Log lines are not printed (a bring-up's logs are for the TUI, or for
``--logs``); every line that is printed passes through :func:`inert`, so a
hostile log line cannot act on the terminal.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import TextIO

import msgspec

from pdtui.config.defaults import DEFAULT_ENGINE
from pdtui.config.schema import RANK_MARK
from pdtui.engine.events import (
    CanaryResult,
    Done,
    Drained,
    Event,
    HostStatus,
    JobStatus,
    LogLines,
    Notice,
    PairMatrix,
    PhaseStarted,
    PlanReady,
    PreflightFinding,
    ProbeResult,
    RouterBackends,
    ServerFailed,
    ServingFigures,
    StateChanged,
    StepChanged,
    StepStatus,
    UnitStatus,
)
from pdtui.engine.states import ServiceState
from pdtui.faces.outcome import since_ready
from pdtui.faces.timeline import finished, slower
from pdtui.gpus.sampler import GpuSample
from pdtui.servers import serving_named
from pdtui.support.text import inert, json_inert

KINDS = {PlanReady: "plan", StepChanged: "step", StateChanged: "state", LogLines: "log", PhaseStarted: "phase",
         ProbeResult: "probe", PairMatrix: "pairs", RouterBackends: "workers", Drained: "drain", CanaryResult: "canary",
         PreflightFinding: "preflight", ServingFigures: "figures", UnitStatus: "unit", JobStatus: "job", HostStatus: "host",
         GpuSample: "gpus", Notice: "notice", ServerFailed: "server_failed", Done: "done"}
LOUD_STATES = (ServiceState.READY, ServiceState.DEGRADED, ServiceState.FAILED, ServiceState.TIMED_OUT,
               ServiceState.STOPPED)

_ENCODE = msgspec.json.Encoder().encode

STEP_MARK = {StepStatus.RUNNING: "▶", StepStatus.DONE: "✓", StepStatus.FAILED: "✗", StepStatus.SKIPPED: "-"}


def to_json(event: Event) -> str:
    """One JSON object: ``kind``, ``elapsed`` and the event's fields (``state`` for state changes).

    msgspec turns an event into JSON in C: a burst's batch of 500 lines costs a fifth of a millisecond, where
    ``dataclasses.asdict`` and ``json.dumps`` took 3.4 ms, and held the event loop while a server printed.
    """
    data = {"kind": KINDS.get(type(event), type(event).__name__.lower()), **msgspec.to_builtins(event)}
    if isinstance(event, StateChanged):
        data["state"] = data.pop("new")
    return to_json_line(data)


def to_json_line(data: dict) -> str:
    """``data`` as one line of JSON, every invisible character escaped (support/text.py's json_inert)."""
    try:
        text = _ENCODE(data).decode()
    except UnicodeEncodeError:      # a lone surrogate (a file name's undecodable byte), which UTF-8 cannot hold
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return json_inert(text)


class JsonPrinter:
    def __init__(self, out: TextIO = sys.stdout, logs: bool = False) -> None:
        self.out, self.logs = out, logs

    def __call__(self, event: Event) -> None:
        if isinstance(event, LogLines) and not self.logs:
            return
        self.out.write(to_json(event) + "\n")
        self.out.flush()


class LinePrinter:
    """One human line per step or state change, and a summary at the end."""

    def __init__(self, out: TextIO = sys.stdout, logs: bool = False,
                 baseline: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.out, self.logs = out, logs
        self.width = 8
        self.failure_lines: dict[str, str] = {}
        self.title = "bringing up"
        self.baseline = baseline or {}       # each service's phase lengths in its last successful run
        self.phases: dict[str, list[tuple[str, float | None]]] = {}
        self.engines: dict[str, str] = {}       # each service's serving engine, from the plan
        self.jobs: dict[str, JobStatus] = {}  # each service's job as last told

    def __call__(self, event: Event) -> None:
        text = self.format(event)
        if text:
            self.out.write(text + "\n")
            self.out.flush()

    def _line(self, elapsed: float, text: str) -> str:
        return f"[{elapsed:7.1f}s] {text}"

    def format(self, event: Event) -> str | None:
        if isinstance(event, PlanReady):
            self.width = max([len(s.name) for s in event.services] + [8])
            self.engines = {s.name: s.engine for s in event.services}
            self.title = event.title
            hosts, clusters = ({s.host for s in event.services if s.job == job} for job in (False, True))
            where = " and ".join(f"{len(found)} {kind}{'s' * (len(found) != 1)}"
                                 for found, kind in ((hosts, "host"), (clusters, "Slurm cluster")) if found)
            what = "bring-up" if event.title == "bringing up" else event.title
            config = f" (config {inert(event.config)})" if event.config else ""
            return self._line(event.elapsed, f"{what} {event.deployment}: {len(event.services)} services on {where}"
                                             f"{config}")
        if isinstance(event, StepChanged):
            if event.status in STEP_MARK:
                return self._line(event.elapsed, f"{STEP_MARK[event.status]} {event.step.value}"
                                  + (f" ({event.status.value})" if event.status is StepStatus.SKIPPED else ""))
            return None
        if isinstance(event, StateChanged):
            return self._state(event)
        if isinstance(event, PhaseStarted):
            return self._phase(event)
        if isinstance(event, ProbeResult):
            mark = "ok" if event.ok else "not yet"
            latency = f" [{event.latency * 1000:.0f} ms]" if event.latency is not None else ""
            return self._line(event.elapsed, f"{event.service:<{self.width}}   {event.check}: {mark}: "
                                             f"{inert(event.detail, 200)}{latency}")
        if isinstance(event, JobStatus):
            return self._job(event)
        if isinstance(event, CanaryResult):
            latency = f" [{event.latency * 1000:.0f} ms]" if event.latency is not None else ""
            return self._line(event.elapsed, f"{event.service:<{self.width}}   canary: "
                                             f"{'ok' if event.ok else 'failed'}: {inert(event.detail, 200)}{latency}")
        if isinstance(event, HostStatus):
            return self._line(event.elapsed, f"host {event.host}: {event.status}"
                                             + (f": {inert(event.detail, 200)}" if event.detail else ""))
        if isinstance(event, PreflightFinding):
            return self._line(event.elapsed, f"{event.level}: {inert(event.text, 400)}")
        if isinstance(event, Notice):
            server = (event.service or "").partition(RANK_MARK)[0]    # a rank's notice names its server and node
            who = f"{event.service}: " if server and not event.text.startswith(server) else ""
            return self._line(event.elapsed, f"{event.level}: {who}{inert(event.text, 300)}")
        if isinstance(event, LogLines):
            if not self.logs:
                return None
            return "\n".join(f"{event.service:>{self.width}} | {inert(r.text)}" for r in event.lines)
        if isinstance(event, Done):
            return self._summary(event)
        return None

    def _phase(self, event: PhaseStarted) -> str:
        """The phase's line; before it, a warning when the phase it ended took three times its last good run."""
        starts = self.phases.setdefault(event.service, [])
        starts.append((event.phase, event.at))
        text = self._line(event.elapsed, f"{event.service:<{self.width}} phase {event.phase}")
        ended, last = finished(starts), self.baseline.get(event.service, {})
        engine = self.engines.get(event.service, DEFAULT_ENGINE)
        if ended is not None and serving_named(engine).slow(ended[1], last.get(ended[0])):
            warning = slower(*ended, last[ended[0]], engine=engine)
            text = self._line(event.elapsed, f"warning: {event.service}: {warning}") + "\n" + text
        return text

    def _job(self, event: JobStatus) -> str | None:
        """A queued job's new reason from Slurm (Priority, then Resources...): the state lines tell the rest."""
        last = self.jobs.get(event.service)
        self.jobs[event.service] = event
        if last is None or last.job_id != event.job_id or event.state != "PENDING" or last.reason == event.reason:
            return None
        return self._line(event.elapsed, f"{event.service:<{self.width}}   job {inert(event.job_id)} "
                                         f"{inert(event.state)}: {inert(event.reason or 'no reason given')}")

    def _state(self, event: StateChanged) -> str:
        state = event.new.value.upper().replace("_", " ") if event.new in LOUD_STATES else event.new.value
        detail = event.reason
        if event.new is ServiceState.READY and event.time_to_ready is not None:
            detail = f"in {event.time_to_ready:.1f}s"
        text = self._line(event.elapsed, f"{event.service:<{self.width}} {state:<9} {inert(detail, 300)}".rstrip())
        if event.line:
            self.failure_lines[event.service] = event.line
            text += "\n" + " " * 11 + f"> {inert(event.line, 300)}"
        return text

    def _failed(self, done: Done) -> str:
        """What failed: the bring-up (or what the run did), or, once it was ready, the deployment since when:
        ``ready at 59.0s · failed 167.0s later, at 226.0s`` (the steps printed before stay true)."""
        if done.ready_at is not None and done.failed_at is not None:
            return since_ready(done.ready_at, "failed", done.failed_at, seconds=True)
        return {"bringing up": "bring-up failed", "taking down": "not all stopped"}.get(self.title, "not all ready")

    def _summary(self, done: Done) -> str:
        down = self.title == "taking down"
        if done.ok and (down or not done.time_to_ready):
            text = self._line(done.elapsed, f"✓ all {'stopped' if down else 'ready'} ({done.elapsed:.1f}s)")
        elif done.ok:
            parts = ", ".join(f"{name} {t:.1f}s" for name, t in done.time_to_ready.items())
            text = self._line(done.elapsed, f"✓ all ready in {done.elapsed:.1f}s (time to ready: {parts})")
        else:
            lines = [self._line(done.elapsed, f"✗ {self._failed(done)}")]
            for name, reason in done.failures.items():
                lines.append(f"{' ' * 11}{name}: {inert(reason, 300)}")
                if name in self.failure_lines:
                    lines.append(f"{' ' * 13}> {inert(self.failure_lines[name], 300)}")
            for name, reason in done.blocked.items():
                lines.append(f"{' ' * 11}{name}: not started ({inert(reason, 300)})")
            if done.waiting:
                lines.append(f"{' ' * 11}not decided yet: {', '.join(done.waiting)}")
            ready = ", ".join(f"{n} {t:.1f}s" for n, t in done.time_to_ready.items())
            if ready:
                lines.append(f"{' ' * 11}ready: {ready}")
            text = "\n".join(lines)
        if done.left_running:
            text += f"\n{' ' * 11}left running: {', '.join(done.left_running)}"
        return text


class UntilDone:
    """Hands events to ``printer`` up to and with the Done: what the closing tails and samplers still emit after
    it would come after the last line (the JSON contract's last object is the ``done``)."""

    def __init__(self, printer: Callable[[Event], None]) -> None:
        self.printer = printer
        self.over = False

    def __call__(self, event: Event) -> None:
        if not self.over:
            self.printer(event)
            self.over = isinstance(event, Done)


class InterruptSummary:
    """Follows the bring-up so that an interrupt can say where it stopped and what had been commanded."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.commanded: list[str] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, StepChanged) and event.status is StepStatus.RUNNING:
            self.step = event.step.value
        elif isinstance(event, StateChanged) and event.new in (ServiceState.STARTING, ServiceState.STOPPING) \
                and event.reason:
            self.commanded.append(event.reason)

    def text(self, left_running: tuple[str, ...]) -> str:
        where = f" during {self.step}" if self.step else ""
        commanded = "; commanded: " + ", ".join(self.commanded) if self.commanded else "; commanded nothing"
        left = f"; left running: {', '.join(left_running)}" if left_running else "; left nothing running"
        return inert(f"interrupted{where}{commanded}{left}", 2000)

    def json(self, left_running: tuple[str, ...]) -> str:
        return to_json_line({"kind": "interrupted", "step": self.step, "commanded": self.commanded,
                             "left_running": list(left_running)})
