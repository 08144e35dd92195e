"""One run's lines: each judged against its run's current invocation, then queued for the faces.

A line of the invocation under way, while its state is judged, is matched
against its serving engine's signatures (engine/readiness.py's judge) and tells
what it means: a failure (decided once it settles), evidence for a check, a
per-request KV transfer error, a server that says it is stuck, a start-up phase,
a batch's figures, the ready line. systemd's own lines tell the unit's end. Every
line, judged or not, is queued and handed out in batches (:meth:`RunLines.flush`); the server's access
lines of pdtui's own polling (marked: hosts/http.py) are folded out.
A start's history is read before its live lines: those are held meanwhile
(:meth:`RunLines.take`) and judged after it, or shown as they are
(:meth:`RunLines.release_held`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdtui.config import regex as config_regex
from pdtui.engine.events import LineKind, LogLines, LogRecord, PhaseStarted
from pdtui.engine.log_entry import LogEntry
from pdtui.engine.readiness import FailureCandidate, LineJudge
from pdtui.engine.router_lines import WorkerLines
from pdtui.engine.states import JUDGED_STATES, SERVING_STATES, ServiceState
from pdtui.engine.tracebacks import TracebackWatch, without_stamp
from pdtui.hosts.http import own_echo
from pdtui.vocabulary.checks import Check
from pdtui.vocabulary.signatures import Severity, Signature

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

S = ServiceState

# systemd's own lines that mean the unit's process ended or the unit changed state.
UNIT_END_MARKERS = ("Main process exited", "Failed with result", "Deactivated successfully", "Stopped ")
SYSTEM_LINES_KEPT = 64     # of one invocation: systemd writes a handful; a unit restarting in a loop is cut short
PHASED_ROLES = ("prefill", "decode")   # the servers whose start-up lines tell their phases


class RunLines:
    """A run's lines: judged, then queued for the faces."""

    def __init__(self, run: ServiceRun, judge: LineJudge) -> None:
        self.run = run
        self.judge = judge
        self.pending: list[LogRecord] = []
        self.rank = 0           # the rank the line being judged comes from (a labelled output's; else 0)
        # a router's warnings about its workers, for the reason it does not take one (checks/refusal.py)
        self.worker_lines = WorkerLines() if run.cfg.is_router else None

    def take(self, entry: LogEntry) -> None:
        """A line from its target's output: held back while a start's history is read."""
        attempt = self.run.attempt
        if attempt.collecting:
            attempt.buffered.append(entry)
        else:
            self.consume(entry)

    def release_held(self) -> None:
        """Nothing will judge what was held back for this attempt: show it as it is."""
        attempt = self.run.attempt
        attempt.collecting = False
        held, attempt.buffered = attempt.buffered, []
        for entry in held:
            self.consume(entry)

    def consume(self, entry: LogEntry) -> None:
        """Judge one line (when it belongs to the current invocation) and queue it for display. Every line of a
        run enters here: a secret of the deployment in it (a server printing its --api-key) is masked here, once,
        before any judge, face, saved log, history or JSON sees it."""
        run, attempt = self.run, self.run.attempt
        if entry.cursor in attempt.backfilled:
            attempt.backfilled.discard(entry.cursor)   # seen in the backfilled history already
            return
        entry.message = run.w.deployment.redactor.redact(entry.message)
        message = entry.message
        if own_echo(message) and not entry.system:
            return      # pdtui's own request in the server's access log: it tells nothing, and would scroll the panel
        current = attempt.invocation is not None and entry.invocation == attempt.invocation
        if entry.system:
            kind = LineKind.SYSTEM
            if current and len(attempt.system_lines) < SYSTEM_LINES_KEPT:
                attempt.system_lines.append(message)
            if current and any(m in message for m in UNIT_END_MARKERS):
                attempt.unit_dirty = True
                attempt.end_logged.set()
                run.wake.set()
        elif current and run.state in JUDGED_STATES:
            kind = self._judge(entry)
        else:
            kind = LineKind.NORMAL
        self.pending.append(LogRecord(message, kind, entry.realtime, entry.cursor))
        run.w.schedule_flush()

    def flush(self) -> None:
        """Hand the lines queued since the last batch to the faces, in one event."""
        if self.pending:
            lines, self.pending = tuple(self.pending), []
            self.run.w.emit(LogLines(self.run.name, lines, self.run.w.elapsed()))

    def _judge(self, entry: LogEntry) -> LineKind:
        """What a line of the invocation under way tells."""
        run, attempt, message = self.run, self.run.attempt, entry.message
        if self.worker_lines is not None:
            self.worker_lines.feed(message, attempt.invocation)
        rank = 0
        if run.ranks_to_join and (labelled := run.rank_of(message)) is not None:
            rank, message = labelled        # judged without its node's label; a failure's line keeps it
        self.rank = rank
        kind, signature = self.judge.judge(message, entry.priority)
        for slow in self.judge.slow_patterns():
            run.tell.notice("warning", f"{run.tell.who}: the config's pattern /{slow}/ took over "
                                       f"{config_regex.SEARCH_LIMIT * 1000:g} ms on one of its lines and matched nothing there: "
                                       "write its repeats so that they cannot split a line in many ways")
        now = run.w.clock()
        attempt.startup.line(now)
        tracebacks = attempt.tracebacks if not rank else attempt.rank_tracebacks.setdefault(rank, TracebackWatch())
        if tracebacks.feed(message, now):
            attempt.warning = message
            if attempt.failure is not None:
                run.wake.set()     # the cause a decided crash may wait for
        if signature is not None:
            self._signature(signature, message if signature.severity is not Severity.FATAL else entry.message)
        if rank:                    # a rank >= 1's start-up: rank 0's lines are its server's phases and figures
            if run.serving.follower_ready(message):
                attempt.joined.add(rank)
                self._log_ok()
        elif not attempt.phases.over and run.cfg.role in PHASED_ROLES:
            self._phase(message, entry.realtime)
        elif run.state in SERVING_STATES and run.serving.batch_line(message):
            attempt.batch_line, attempt.batch_at = message, now
        if kind is LineKind.READY:
            attempt.ready_line = True
            self._log_ok()
        elif run.state is S.WAITING and not attempt.fresh_line and (attempt.log_ok or not run.cfg.ready.log) \
                and not run.serving.request_line(message):
            attempt.fresh_line = True   # a service that logs while it is probed is often becoming ready (a line
            run.wake.set()              # of a request, pdtui's own probe's among them, tells nothing of that)
        return kind

    def _log_ok(self) -> None:
        """Its ready line came, and every rank >= 1 of its own output said it is ready too (a job over several
        nodes'; a unit has none)."""
        attempt = self.run.attempt
        attempt.log_ok = attempt.ready_line and len(attempt.joined) >= self.run.ranks_to_join
        self.run.wake.set()

    def _phase(self, message: str, at: float | None) -> None:
        """Tell a start-up phase as its first line comes (dated by the journal, for true durations)."""
        run = self.run
        phase = run.attempt.phases.feed(message)
        if phase is not None:
            run.attempt.startup.phase_began(run.w.clock())
            run.w.emit(PhaseStarted(run.name, phase, run.w.elapsed(), at))
            run.waiters.stepped()

    def _signature(self, signature: Signature, message: str) -> None:
        """What a line that matched a signature tells, by its kind (see signatures.py)."""
        if signature.severity is Severity.FATAL:
            self._failure(signature, message)
        elif signature.severity is Severity.EVIDENCE and signature.check:
            self.run.tell.probe_result(Check(signature.check, True, signature.reason))
        elif signature.severity is Severity.TRANSFER:
            self._transfer_error(signature, message)
        elif signature.severity is Severity.HANG:
            self._hang(signature, message)
        else:
            self.run.attempt.warning = message

    def _hang(self, signature: Signature, message: str) -> None:
        """The server says it is stuck: a warning naming where it is, once per kind of line in an invocation."""
        run, attempt = self.run, self.run.attempt
        attempt.warning = message
        if signature.reason in attempt.hangs_told:
            return
        attempt.hangs_told.add(signature.reason)
        where = attempt.startup.where(serving=run.state in SERVING_STATES)
        who = f"{run.rank_words(self.rank)}: " if self.rank else ""
        run.tell.notice("warning", f"{run.tell.who}: {who}{signature.reason} {where}: {message}")

    def _transfer_error(self, signature: Signature, message: str) -> None:
        """A per-request KV transfer error: a warning naming the service, told at the 1st, 10th, 100th..."""
        run, attempt = self.run, self.run.attempt
        attempt.transfer_errors += 1
        attempt.note_transfer(run.w.clock(), signature.rank, without_stamp(message))
        count = attempt.transfer_errors
        if str(count).rstrip("0") == "1":
            nth = "" if count == 1 else f" (the {count}th)"
            run.tell.notice("warning", f"{run.name}: KV transfer error{nth}: {message}")

    def _failure(self, signature: Signature, message: str) -> None:
        """A fatal line: the attempt's failure (or a better reason for it), decided once it settles."""
        run, attempt = self.run, self.run.attempt
        if signature.advice and attempt.advice is None:
            attempt.advice = signature.advice     # the first word on what to check next (the cause comes first)
        if attempt.failure is None:
            attempt.failure = FailureCandidate(signature, message)
            attempt.failure_at = run.w.clock()
        else:
            attempt.failure.consider(signature, message)
        run.wake.set()
