"""One service's run, wherever it runs: its state machine, its start, its wait and its watch.

A :class:`ServiceRun` owns its state (an enum moved only through the checked
transition table of states.py) and goes through start -> backfill -> wait ->
watch for one :class:`Attempt`. A retry begins a fresh Attempt: nothing an
earlier start saw (its invocation, its failure line, its checks) can leak into
the next. What touches the service where it runs (start or attach, look,
stop) is its target's subclass: a unit's (targets/systemd/unit_run.py), a
Slurm job's (targets/slurm/job_run.py). What a run needs of the rest of the
bring-up comes in one :class:`Bringup` (the orchestrator), beside the session of
the place it runs on. Its lines are judged by its :class:`~pdtui.engine.run_lines.RunLines`,
its start-up watched for a stall by the attempt's
:class:`~pdtui.engine.startup_watch.StartupWatch`, its checks run from the registry
of engine/checks/.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from pdtui.config import Deployment, ServiceConfig
from pdtui.engine.checks import backend_checks
from pdtui.engine.checks.http_status import http_check, polled
from pdtui.engine.events import CanaryResult, Event, Notice, PairResult, ProbeResult, ServiceInfo, StateChanged
from pdtui.engine.figures import FETCH_TIMEOUT
from pdtui.engine.intent import Action
from pdtui.engine.log_entry import YIELD_EVERY, LogEntry
from pdtui.engine.readiness import FailureCandidate, LineJudge
from pdtui.engine.router_proving import RouterProving
from pdtui.engine.run_lines import PHASED_ROLES, RunLines
from pdtui.engine.session import Session
from pdtui.engine.startup_watch import StartupWatch, stall_after
from pdtui.engine.states import ALLOWED, SERVING_STATES, ServiceState, check_transition
from pdtui.engine.timing import Timing
from pdtui.engine.tracebacks import HEADER, TracebackWatch, ranks_of
from pdtui.fabric.findings import MemoryLock
from pdtui.hosts.base import LOOPBACK_ADDRESS, UNANSWERED, Host, HostTimedOut
from pdtui.hosts.http import HttpProber
from pdtui.servers import PhaseTracking, ServerCommand, serving_for
from pdtui.vocabulary.checks import Check, Learned
from pdtui.vocabulary.figures import Figures, KvTotals

S = ServiceState
T = TypeVar("T")

# A host's unit looks take at most about 1/(1 + LOOK_REST) of its time (see ServiceRun.beat).
LOOK_REST = 4.0
# A look this many beats old still decides how a unit is started: looks on the beat are a beat apart, plus the
# time each command takes.
FRESH_LOOKS = 1.5
# After ready, health must fail this many checks in a row (over the service's unhealthy_after) to fail it.
HEALTH_FAILS_IN_A_ROW = 3
LEAST_WAIT = 0.001     # seconds: a run never waits for less (see ServiceRun._sleep)
# A traceback's exception is the cause of a crash when it came within this many seconds of the unit's end.
CAUSE_RECENT = 30.0
RECENT_TRANSFERS = 32   # per-request KV transfer errors kept, to quote the one that names a request


def _any_step() -> bool:
    """What :meth:`ServiceRun.next_step` waits for: any step."""
    return True


@dataclass(slots=True)
class Attempt:
    """What one start of the unit has shown so far: everything judged belongs to its invocation."""

    startup: StartupWatch                         # its start-up phases so far, watched for a stall or slowness
    number: int = 0
    started_at: float | None = None
    attached: bool = False                        # found running: not started by this attempt
    invocation: str | None = None
    collecting: bool = False                      # start issued, invocation not yet known
    buffered: list[LogEntry] = field(default_factory=list)
    backfilled: set[str] = field(default_factory=set)
    log_ok: bool = False
    ready_line: bool = False                      # its ready line came (log_ok once every rank joined too)
    joined: set[int] = field(default_factory=set)  # the ranks >= 1 whose lines said they are ready (one output's)
    rank_tracebacks: dict[int, TracebackWatch] = field(default_factory=dict)   # ... and each one's tracebacks
    failure: FailureCandidate | None = None
    failure_at: float | None = None
    unit_problem: str | None = None
    unit_dirty: bool = False
    end_logged: asyncio.Event = field(default_factory=asyncio.Event)   # systemd logged the invocation's end
    system_lines: list[str] = field(default_factory=list)   # the target's own lines on this invocation (a few)
    last_checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    proving: RouterProving | None = None          # a router's probe, pairs and canary for this start
    next_unit_check: float = 0.0
    fresh_line: bool = False                      # a line came while probing: probe again soon
    warning: str | None = None                    # the latest warning line (a traceback's exception): evidence
    tracebacks: TracebackWatch = field(default_factory=TracebackWatch)   # the exception that ends the latest
    transfer_errors: int = 0                      # per-request KV transfer errors in this invocation
    transfers: deque[tuple[float, int, str]] | None = None   # the latest, with their ranks (see note_transfer)
    learned: Learned = field(default_factory=Learned)   # what its checks learned once (the bootstrap port)
    without_metrics: bool = False                 # its /metrics answered 404 (no --enable-metrics) or no Prometheus
                                                  # text: not asked again in this start (its batch lines tell)
    unhealthy_since: float | None = None          # after ready: when health began failing, and how often since
    unhealthy_count: int = 0
    hangs_told: set[str] = field(default_factory=set)   # the kinds of "I am stuck" line told so far
    advice: str | None = None                     # what to check next, from a fatal line's signature
    batch_line: str | None = None                 # serving: its latest batch line, read when its figures are
    batch_at: float | None = None                 # when that line came (the run's clock)
    batch_read: Figures | None = None             # the figures of the latest batch line read so far
    enabling: asyncio.Task | None = None          # a router's ``systemctl enable``, beside its start-up
    looks_late: bool = False                      # its latest look timed out (told once while they do)

    @property
    def phases(self) -> PhaseTracking:
        """The invocation's start-up phases so far, read by its serving engine."""
        return self.startup.phases

    def note_transfer(self, at: float, rank: int, line: str) -> None:
        """A per-request KV transfer error's line and its signature's rank, kept among the latest RECENT_TRANSFERS
        to quote the one that names a failed request best. Their deque is made at the first: most starts have none,
        and a fleet's thousand empty ones held 0.75 MB."""
        if self.transfers is None:
            self.transfers = deque(maxlen=RECENT_TRANSFERS)
        self.transfers.append((at, rank, line))

    def batch(self, read: Callable[[str], Figures | None]) -> Figures | None:
        """The figures of its latest batch line that ``read`` could read (a serving engine's parser). A serving
        server logs a batch line every few hundred milliseconds while the figures are read every few seconds:
        each line is kept as it comes and read only when asked for."""
        if self.batch_line is not None:
            self.batch_read = read(self.batch_line) or self.batch_read
            self.batch_line = None
        return self.batch_read


class Bringup(Protocol):
    """What a run uses of the bring-up around it: the orchestrator is one (a test may bring its own)."""

    deployment: Deployment
    timing: Timing
    smoke: bool                                   # a router's smoke generation before it is called ready
    baseline: Mapping[str, Mapping[str, float]]   # each service's phase lengths in its last successful run
    canary: bool                                  # a ready router's canary generations (its config's interval)
    pairs: bool | None                            # each pair proven directly: always, never, None: when several

    @property
    def peers(self) -> Mapping[str, ServiceRun]:
        """Every run of the deployment, by service."""

    def clock(self) -> float: ...

    def elapsed(self) -> float: ...

    def emit(self, event: Event) -> None: ...

    def changed(self) -> None:
        """After every transition: the steps and whoever waits on a state."""

    def schedule_flush(self) -> None:
        """Lines are pending: hand them out with the next batch."""

    def beat_origin(self) -> float:
        """The moment the bring-up began: every host's beat counts from it."""


class ServiceRun:
    """One service during a bring-up and after it."""

    ends_in_its_lines = False
    """Its target logs the end of a run among the run's lines (systemd's in a unit's journal), and that line wakes
    the run at once: once it is ready, its looks are only a backstop, on the slower ``timing.unit_watch`` beat."""

    def __init__(self, cfg: ServiceConfig, judge: LineJudge) -> None:
        self.cfg = cfg
        self.lines = RunLines(self, judge)          # its lines, judged and queued for the faces
        self.state = S.PENDING
        self.reason = ""
        self.serving = serving_for(cfg)             # the software its servers run (SGLang)
        self.bringup: Bringup | None = None
        self.attempt = Attempt(self._startup_watch())
        self.started_by_us = False
        self.refused = False                        # the preflight refused it as it would run (Preflight)
        self.main_pid = 0                           # its main process, where its target knows it (0: unknown)
        self.judged = False                         # attached and judged once (status: a verdict exists)
        self.time_to_ready: float | None = None
        self.wake = asyncio.Event()
        self._awaited: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []   # see reaches
        self.task: asyncio.Task | None = None
        self._session: Session | None = None
        self.address = LOOPBACK_ADDRESS             # where its ports are reached from its session's host
        self.planned: ServerCommand | None = None   # what it will run, as its target read it (during a preflight)
        self.memory_lock: MemoryLock | None = None  # how much memory it may pin, where its target tells
        self._checks = backend_checks(cfg, self.serving.backend_checks())

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def under_way(self) -> bool:
        """Whether its unit was started by this bring-up or found running (the steps count it as begun)."""
        return self.started_by_us or self.attempt.attached

    def wire(self, bringup: Bringup, session: Session) -> None:
        """Join a bring-up, through the session of the place it runs on (its host's, its cluster's)."""
        self.bringup, self._session = bringup, session

    @property
    def w(self) -> Bringup:
        assert self.bringup is not None, f"{self.name}: not wired to a bring-up"
        return self.bringup

    @property
    def session(self) -> Session:
        assert self._session is not None, f"{self.name}: not wired to a bring-up"
        return self._session

    def fresh_attempt(self, *, collecting: bool = False) -> Attempt:
        """The next start's Attempt, begun now: numbered after the last one, its phases read by its serving engine
        (``collecting``: its lines held until its start is known)."""
        return Attempt(self._startup_watch(), self.attempt.number + 1, started_at=self.w.clock(), collecting=collecting)

    def _startup_watch(self) -> StartupWatch:
        last = self.bringup.baseline.get(self.name, {}) if self.bringup is not None else {}
        return StartupWatch(self.serving, self.serving.phase_tracker(), stall_after(self.cfg.stall_after, self.cfg.timeout),
                            last, watched=self.cfg.role in PHASED_ROLES)

    def placed(self) -> tuple[str | None, str | None]:
        """Its job's id and node, for the state it tells (a unit has neither)."""
        return None, None

    @property
    def ranks_to_join(self) -> int:
        """How many ranks >= 1 print into this run's own output (a Slurm job over several nodes): it is ready only
        once each said it is. A unit per node has none: each rank is a run of its own."""
        return 0

    def rank_of(self, message: str) -> tuple[int, str] | None:
        """The rank a line of its output comes from and the line without its label, where its target labels them."""
        return None

    def rank_words(self, rank: int) -> str:
        """A rank of its output as the user finds it: ``rank 1``, and where its target knows it, its node."""
        return f"rank {rank}"

    # -- what its target's run implements ------------------------------------------
    @property
    def unit(self) -> str:
        """The name its target knows it by (a unit's, a job's)."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        """Whether it was running when last looked at."""
        raise NotImplementedError

    def names_for(self, router: ServiceConfig) -> frozenset[str]:
        """The host names under which ``router`` knows this backend (its workers' URLs name one of them)."""
        raise NotImplementedError

    def info(self, deployment: Deployment) -> ServiceInfo:
        """The service as the faces draw it, with the exact commands a restart or stop from the UI runs."""
        raise NotImplementedError

    def url_for(self, router: ServiceConfig) -> str | None:
        """The URL ``router`` reaches this backend at (None: not known yet, a job not placed)."""
        raise NotImplementedError

    async def bring_up(self, action: Action = Action.START) -> bool:
        """Start a fresh attempt and see it through (:meth:`_wait_ready`, :meth:`_watch`); True if it was ready."""
        raise NotImplementedError

    async def stop(self, *, disable: bool = False, why: str = "") -> None:
        """Stop it and wait until it has stopped: STOPPED (its reason ending in ``why``, when given: what it was
        stopped for), or FAILED naming what still runs."""
        raise NotImplementedError

    async def _check_unit(self) -> None:
        """Look at it where it runs: ``attempt.unit_problem`` says why once its current run is over."""
        raise NotImplementedError

    async def keep_looking(self) -> None:
        """While it waits for what it comes after: nothing to look at, unless its target says otherwise."""

    async def answered(self, look: Awaitable[T]) -> T | None:
        """``look``'s answer; None when it told nothing of the service: its host out of reach (the host's status
        says so) or too slow to answer (told here, once while it lasts; a host loading weights on every core may
        take more than the command timeout for a ``systemctl show``). It is looked at again on its beat, and its
        timeout counts meanwhile: a slow look is no failure of the service."""
        try:
            answer = await look
        except UNANSWERED as exc:
            if isinstance(exc, HostTimedOut) and not self.attempt.looks_late:
                self.attempt.looks_late = True
                self.notice("warning", f"{exc}: it is looked at again on its beat (a loaded host answers late)")
            return None
        self.attempt.looks_late = False
        return answer

    # -- the state machine ---------------------------------------------------
    def transition(self, new: ServiceState, reason: str = "", line: str | None = None) -> None:
        check_transition(self.name, self.state, new)
        self.lines.flush()
        old, self.state, self.reason = self.state, new, reason
        ttr = None
        if new is S.PENDING:
            self.judged = False
        if new is S.READY and old is not S.DEGRADED and self.attempt.started_at is not None and not self.attempt.attached:
            ttr = self.time_to_ready = round(self.w.clock() - self.attempt.started_at, 3)
        self.w.emit(StateChanged(self.name, old, new, reason, line, self.w.elapsed(), ttr, *self.placed()))
        self.w.changed()
        self.stepped()

    def stepped(self) -> None:
        """It changed state or began a start-up phase: wake whoever waits for a step that makes their condition
        hold (each looked at here, so a waiter wakes once, not at every step)."""
        if not self._awaited:
            return
        awaited, self._awaited = self._awaited, []
        for condition, future in awaited:
            if future.done():                   # its waiter gave up (a timeout)
                continue
            if condition():
                future.set_result(None)
            else:
                self._awaited.append((condition, future))

    async def reaches(self, condition: Callable[[], bool]) -> None:
        """Until ``condition`` holds, looked at now and at each of its steps. A waiter on one run is woken by that
        run alone: a fleet's thousand runs change state thousands of times a second, and the bring-up's ``until``
        wakes every waiter at each."""
        if not condition():
            await self._step_where(condition)

    async def next_step(self) -> None:
        """Until it changes state or begins a start-up phase."""
        await self._step_where(_any_step)

    def _step_where(self, condition: Callable[[], bool]) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self._awaited.append((condition, future))
        return future

    @property
    def who(self) -> str:
        """How its notices name it: ``decode``, or a rank >= 1 by its server and node, ``decode: rank 1 on gpu-b``."""
        return f"{self.cfg.server}: rank {self.cfg.rank} on {self.cfg.host}" if self.cfg.follower else self.name

    def notice(self, level: str, text: str) -> None:
        """Tell something about this service that is not a change of its state."""
        self.w.emit(Notice(level, text, self.name, self.w.elapsed()))

    async def close(self) -> None:
        """Stop watching (its task is the orchestrator's to end): what it follows of its own. A unit's run
        follows nothing of its own (its host's tail brings its lines)."""

    def probe_result(self, check: Check, *, again: bool = False) -> None:
        """Tell a check's result when it differs from the last one told (``again``: asked for, told anyway)."""
        told = self.attempt.last_checks
        if again or told.get(check.name) != (check.ok, check.detail):
            told[check.name] = (check.ok, check.detail)
            self.w.emit(ProbeResult(self.name, check.name, check.ok, check.detail, check.latency, self.w.elapsed()))

    def _tell_advice(self) -> None:
        """Under a failure, what to check next, where a source says it (docs/signatures.md names each)."""
        if self.attempt.advice:
            self.notice("info", f"{self.who}: next: {self.attempt.advice}")

    # -- down ----------------------------------------------------------------------
    def _settle(self, state: ServiceState, reason: str) -> None:
        """Move to ``state`` from wherever the run is: through STOPPING (or PENDING) where the table has no
        direct way."""
        if self.state is state:
            return
        if state not in ALLOWED[self.state]:
            self.transition(S.STOPPING if S.STOPPING in ALLOWED[self.state] else S.PENDING, reason)
        self.transition(state, reason)

    async def _wait_ready(self, deadline: float) -> None:
        attempt, timing, clock = self.attempt, self.w.timing, self.w.clock
        next_probe = clock()
        attempt.next_unit_check = self.beat(next_probe)   # _start has just looked at the unit
        last_probe = -math.inf
        while True:
            failure = await self._failure()
            if failure:
                self.transition(S.FAILED, *failure)
                self._tell_advice()
                return
            for warning in attempt.startup.warnings(clock(), attempt.started_at, self.cfg.timeout, attempt.warning):
                self.notice("warning", f"{self.who}: {warning}")
            probing = attempt.log_ok or not self.cfg.ready.log
            now = clock()
            if attempt.fresh_line:
                attempt.fresh_line = False
                next_probe = min(next_probe, last_probe + timing.line_probe_gap)
            if not attempt.failure and probing and now >= next_probe:
                last_probe, next_probe = now, now + timing.poll
                outcome = await self._probe()
                if outcome is True:
                    if attempt.enabling is not None:
                        await attempt.enabling     # ready means enabled too: the outcome never outruns it
                    self.transition(S.READY, "all checks hold")
                    return
                if isinstance(outcome, Check):
                    self.transition(S.FAILED, f"{outcome.name}: {outcome.detail}")
                    return
            now = clock()
            if now >= deadline:
                self.transition(S.TIMED_OUT, self._waiting_for(), self.attempt.warning)
                return
            if not self.judged:
                self.judged = True           # every check has had its first look
                self.w.changed()
            await self._sleep(min(deadline, self._next_look(), next_probe if probing else deadline,
                                  attempt.startup.due(attempt.started_at)) - now)

    async def _failure(self) -> tuple[str, str | None] | None:
        """A settled failure line or a dead unit, as (reason, line); looks at the unit when that is due."""
        attempt = self.attempt
        now = self.w.clock()
        settled = attempt.failure is not None and attempt.failure_at is not None and \
            now - attempt.failure_at >= self.w.timing.settle
        if attempt.failure and settled and self._cause_due(now) <= now:
            return self._crash_reason(attempt.failure), attempt.failure.line
        # (a crash whose traceback's exception is on its way is decided once it came: the unit is looked at meanwhile)
        if attempt.unit_dirty or now >= attempt.next_unit_check:
            attempt.unit_dirty = False
            attempt.next_unit_check = self.beat(now)
            await self._check_unit()
        if attempt.unit_problem and not attempt.failure:
            await self._last_lines()
            if attempt.failure:
                return None          # its last lines said why: that line's settle decides
            return self.ended_reason(attempt.unit_problem, attempt.tracebacks.recent_cause(now, CAUSE_RECENT)), \
                attempt.warning
        return None

    def ended_reason(self, problem: str, cause: str | None) -> str:
        """Why a run that is over ended: the target's ``problem`` (its state), completed with the exception of a
        traceback just before, if there was one."""
        return f"{problem}: {cause}" if cause else problem

    def _cause_due(self, now: float) -> float:
        """Until when a decided crash waits for its traceback's exception: its header came, its exception not
        yet (a bounded wait: ``timing.cause`` past the settle); ``now`` or earlier when it waits for nothing."""
        attempt = self.attempt
        failure, since = attempt.failure, attempt.failure_at
        if failure is None or since is None or HEADER not in failure.line or attempt.tracebacks.cause is not None:
            return now
        return since + self.w.timing.settle + self.w.timing.cause

    def _crash_reason(self, failure: FailureCandidate) -> str:
        """The failure's reason; a traceback's header completed with its ranks and the exception that ended it:
        ``scheduler crashed (TP5): RuntimeError: Mooncake memory registration failed.``"""
        reason, cause = failure.signature.reason, self.attempt.tracebacks.cause
        if HEADER not in failure.line or cause is None:
            return reason
        ranks = ranks_of(failure.line)
        return f"{reason} ({ranks}): {cause}" if ranks else f"{reason}: {cause}"

    async def _last_lines(self) -> None:
        """The service's run is over: let its last lines in before saying why from its state alone. Nothing to
        wait for here; a target whose lines can come after its look says so (a unit's journal does)."""

    def refuse(self, reason: str) -> None:
        """The preflight refuses it as it would run (its unit, its pair, its host, its fabric): it fails, and the
        command that was to start it starts nothing else either (Preflight)."""
        self.refused = True
        self.transition(S.FAILED, reason)

    def beat(self, now: float) -> float:
        """The next moment the unit is looked at: every service on the same beat, so a host's looks share a command.

        A host whose looks are slow (a loaded machine) is looked at on a later
        beat: after a look that took d seconds, none before LOOK_REST * d. Its
        units' ends still wake their services at once, through systemd's lines.
        A ready service whose target logs its end is looked at on the slower
        ``unit_watch`` beat (a multiple of ``unit_poll``: the looks still share).
        """
        poll, rest = self._look_poll(), self._look_rest()
        origin = self.w.beat_origin()
        return origin + (math.floor((now + rest - origin) / poll) + 1) * poll

    def look_is_fresh(self, at: float) -> bool:
        """Whether a look made at ``at`` still decides how the unit is started: it is younger than FRESH_LOOKS
        gaps between two looks on its beat, a slow host's rest included (its looks are that far apart)."""
        return self.w.clock() - at < FRESH_LOOKS * (self._look_poll() + self._look_rest())

    def _look_poll(self) -> float:
        timing = self.w.timing
        return timing.unit_watch if self.ends_in_its_lines and self.state in SERVING_STATES else timing.unit_poll

    def _look_rest(self) -> float:
        return LOOK_REST * self.session.looker.last_took

    def _next_look(self) -> float:
        """When :meth:`_failure` has something new to look at, at the latest."""
        attempt = self.attempt
        if attempt.failure and attempt.failure_at is not None:
            settled = attempt.failure_at + self.w.timing.settle
            return min(attempt.next_unit_check, max(settled, self._cause_due(settled)))
        return attempt.next_unit_check

    async def _sleep(self, seconds: float) -> None:
        """Until woken (a line, the unit's end) or ``seconds`` passed; at once when a wake came since the last
        sleep ended (the line or end that came while a probe or a look was awaited), never lost.

        ``asyncio.timeout``, not ``wait_for``: Python 3.11's ``wait_for`` loses a
        cancellation that comes as its timeout fires, and the run then never ends.
        A wait shorter than :data:`LEAST_WAIT` lasts that long, a wait of zero
        or less too: the loop runs a timer up to its clock's resolution early,
        and a moment due now by one sum may not be due yet by the difference it
        is compared with (``failure_at + settle - now`` is 0.0 while
        ``now - failure_at`` is a hair under ``settle``); it would be waited for
        again and again (for ever, on a loop whose time moves only when it waits).
        """
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(LEAST_WAIT, seconds)):
                await self.wake.wait()
        self.wake.clear()

    # -- checks ---------------------------------------------------------------------
    async def _probe(self) -> bool | Check | None:
        """Run the active checks: True when all hold, a Check when one failed for good, else None."""
        if self.cfg.is_router:
            return await self._proving().verdict(self.session.host)
        for readiness in self._checks:
            check = await readiness.run(self)
            self.probe_result(check)
            if not check.ok:
                return None
        return True

    # What the checks see of it (vocabulary/checks.py's Probed).
    @property
    def host(self) -> Host:
        return self.session.host

    @property
    def prober(self) -> HttpProber:
        """Its HTTP requests, with its API key where the config names one (a router's)."""
        return self.session.prober.with_key(self.cfg.api_key)

    @property
    def learned(self) -> Learned:
        return self.attempt.learned

    def _proving(self) -> RouterProving:
        """This attempt's proving of a router (it remembers the model, the smoke failures, the pairs)."""
        if self.attempt.proving is None:
            self.attempt.proving = RouterProving(self)
        return self.attempt.proving

    async def prove_pairs(self) -> None:
        """A router: prove every pair behind it again, now."""
        await self._proving().prove_pairs()

    async def prove_pairs_with(self, service: str) -> list[PairResult] | None:
        """A router: prove every pair behind it again, now; the pairs ``service`` is in (None: it proves no pairs)."""
        return await self._proving().prove_pairs_with(service)

    def polled(self, path: str) -> str:
        """``path`` as pdtui asks it of this service again and again (checks/http_status.py's :func:`polled`)."""
        return polled(self.cfg, path)

    @property
    def has_metrics(self) -> bool:
        """Whether its ``/metrics`` may be asked in this start (a port, and no answer yet that said it has none)."""
        return bool(self.cfg.port) and not self.attempt.without_metrics

    async def metrics(self, read: Callable[[str], T]) -> T | None:
        """Its ``/metrics`` text read by ``read`` (a serving engine's parser); None without them. A 404 (started
        without --enable-metrics) or text that is not Prometheus's is not asked again in this start."""
        if not self.has_metrics:
            return None
        assert self.cfg.port is not None
        result = await self.prober.get(self.cfg.port, self.polled("/metrics"), timeout=FETCH_TIMEOUT,
                                       address=self.address)
        if not result.ok:
            self.attempt.without_metrics = result.status == 404
            return None
        try:
            return read(result.body.decode(errors="replace"))
        except (ValueError, KeyError, IndexError, TypeError):   # not Prometheus text
            self.attempt.without_metrics = True
            return None

    async def kv_totals(self) -> tuple[str, KvTotals | None]:
        """Its KV transfer series summed over its ranks, by its name (None without them)."""
        return self.name, await self.metrics(self.serving.kv_totals)

    def _waiting_for(self) -> str:
        """Why a start ran out of time: where it stood (the phase it was stuck in, else its phase, since when and
        its silence), else what it was still waiting for. The latest warning it logged goes with it, as its line."""
        now, started = self.w.clock(), self.attempt.started_at
        stall = self.attempt.startup.stall(now, started) or self.attempt.startup.position(now, started)
        if stall is not None:
            return stall.timeout_reason(self.cfg.timeout)
        told = self.attempt.last_checks
        pending = [name for name, (ok, _) in told.items() if not ok]
        if self.cfg.ready.log and not self.attempt.log_ok:
            missing = [str(rank) for rank in range(1, self.ranks_to_join + 1) if rank not in self.attempt.joined]
            pending.insert(0, f"log line /{self.cfg.ready.log}/" if not self.attempt.ready_line else
                           f"rank {', '.join(missing)}'s ready line (its dummy health server)")
        details = [f"{n} ({told[n][1]})" if n in told else n for n in pending]
        return f"not ready after {self.cfg.timeout:g}s: waiting for " + (", ".join(details) or "readiness")

    # -- after ready --------------------------------------------------------------------
    async def _watch(self) -> None:
        """After READY: a fatal line, a dead unit or health that keeps failing fails the service.

        One request's error (a traceback, a transfer error) never does: the
        server goes on serving the next one. A router's canary that fails
        makes it DEGRADED until one passes again.
        """
        clock, timing = self.w.clock, self.w.timing
        self.attempt.next_unit_check = self.beat(clock())
        next_health = clock() + timing.watch_poll if self.cfg.ready.http else math.inf
        interval = self.cfg.canary if self.cfg.is_router and self.w.canary else None
        next_canary = clock() + interval if interval else math.inf
        while self.state in SERVING_STATES:
            failure = await self._failure()
            if failure is None and clock() >= next_health:
                next_health = clock() + timing.watch_poll
                failure = await self._health_lost()
            if failure:
                reason, line = failure
                self.transition(S.FAILED, f"after ready: {reason}", line)
                self._tell_advice()
                break
            if interval and clock() >= next_canary:
                await self._canary()
                next_canary = clock() + interval
            await self._sleep(min(self._next_look(), next_health, next_canary) - clock())
        self._tell_degraded()

    async def canary_now(self) -> None:
        """A router: its canary now, not at its next interval (a backend it lacked is back)."""
        if self.state in SERVING_STATES:
            await self._canary()

    async def _canary(self) -> None:
        """One canary generation through this ready router: a failure degrades it, a pass restores it."""
        check = await self._proving().canary()
        if self.state not in SERVING_STATES:
            return     # it failed meanwhile: that verdict stands
        self.w.emit(CanaryResult(self.name, check.ok, check.detail, check.latency, self.w.elapsed()))
        if check.ok and self.state is S.DEGRADED:
            self.transition(S.READY, f"canary passes again: {check.detail}")
        elif not check.ok and self.state is S.READY:
            self.transition(S.DEGRADED, f"canary failed: {check.detail}")

    async def _health_lost(self) -> tuple[str, str | None] | None:
        """One health check of a ready service; a failure once it has failed long enough in a row."""
        assert self.cfg.port is not None and self.cfg.ready.http is not None
        attempt = self.attempt
        check = await http_check(self.prober, self.cfg.port, self.cfg.ready.http, self.address,
                                 sent=self.polled(self.cfg.ready.http))
        self.probe_result(check)
        now = self.w.clock()
        if check.ok:
            attempt.unhealthy_since, attempt.unhealthy_count = None, 0
            return None
        if attempt.unhealthy_since is None:
            attempt.unhealthy_since = now
        attempt.unhealthy_count += 1
        failing = now - attempt.unhealthy_since
        if attempt.unhealthy_count >= HEALTH_FAILS_IN_A_ROW and failing >= self.cfg.unhealthy_after:
            return (f"{check.name} failing for {failing:.0f}s ({attempt.unhealthy_count} checks in a row): "
                    f"{check.detail}", attempt.warning)
        return None

    def _tell_degraded(self) -> None:
        """It failed after it was ready: what was ready on top of it (the router) now runs without it."""
        for name in self.w.deployment.dependents(self.name):
            if self.w.peers[name].state in SERVING_STATES:
                self.w.emit(Notice("warning", f"{name} degraded: {self.name} failed after it was ready ({self.reason})",
                                   name, self.w.elapsed()))


async def yield_every(count: int, every: int = YIELD_EVERY) -> None:
    """Let the event loop run every ``every`` items of a long synchronous batch."""
    if count % every == 0:
        await asyncio.sleep(0)

