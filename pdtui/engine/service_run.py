"""One service's run, wherever it runs: its state machine, its start, its wait and its watch.

A :class:`ServiceRun` owns its state (an enum moved only through the checked
transition table of states.py) and goes through start -> backfill -> wait ->
watch for one :class:`Attempt`. A retry begins a fresh Attempt: nothing an
earlier start saw (its invocation, its failure line, its checks) can leak into
the next. What touches the service where it runs (start or attach, look,
stop) is its target's subclass: a unit's (targets/systemd/unit_run.py), a
Slurm job's (targets/slurm/job_run.py). What a run needs of the rest of the
bring-up comes in one :class:`Bringup` (the orchestrator), beside the session of
the place it runs on.

The rest is done by its parts, each with one job:

- its lines, judged and queued for the faces: :class:`~pdtui.engine.run_lines.RunLines`;
- its looks at the service, on its place's beat: :class:`~pdtui.engine.run_looks.RunLooks`;
- what wakes it at once (a line, its unit's end): :class:`~pdtui.engine.wake.Wake`;
- whoever waits on its steps: :class:`~pdtui.engine.step_waiters.StepWaiters`;
- its notices and checks told to the faces: :class:`~pdtui.engine.run_teller.RunTeller`;
- whether it has failed, and why: :class:`~pdtui.engine.failure_watch.FailureWatch`;
- the wait for ready, its checks from the registry of engine/checks/: :class:`~pdtui.engine.ready_wait.ReadyWait`;
- the watch after ready (health, a router's canary): :class:`~pdtui.engine.serving_watch.ServingWatch`;
- its ``/metrics``: :class:`~pdtui.engine.server_metrics.ServerMetrics`;
- a router's proving, one per start: :class:`~pdtui.engine.router_proving.RouterProving`.

Its start-up is watched for a stall by the attempt's
:class:`~pdtui.engine.startup_watch.StartupWatch`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pdtui.config import Deployment, ServiceConfig
from pdtui.engine.events import Event, ServiceInfo, StateChanged
from pdtui.engine.failure_watch import FailureWatch
from pdtui.engine.intent import Action
from pdtui.engine.log_entry import YIELD_EVERY, LogEntry
from pdtui.engine.readiness import FailureCandidate, LineJudge
from pdtui.engine.ready_wait import ReadyWait
from pdtui.engine.router_proving import RouterProving
from pdtui.engine.run_lines import RunLines
from pdtui.engine.run_looks import RunLooks
from pdtui.engine.run_teller import RunTeller
from pdtui.engine.server_metrics import ServerMetrics
from pdtui.engine.serving_watch import ServingWatch
from pdtui.engine.session import Session
from pdtui.engine.startup_watch import StartupWatch
from pdtui.engine.states import ALLOWED, ServiceState, check_transition
from pdtui.engine.step_waiters import StepWaiters
from pdtui.engine.timing import Timing
from pdtui.engine.tracebacks import TracebackWatch
from pdtui.engine.wake import Wake
from pdtui.fabric.findings import MemoryLock
from pdtui.hosts.base import LOOPBACK_ADDRESS, Host
from pdtui.hosts.http import HttpProber
from pdtui.servers import PhaseTracking, ServerCommand, serving_for
from pdtui.vocabulary.checks import Learned
from pdtui.vocabulary.figures import Figures

S = ServiceState

RECENT_TRANSFERS = 32   # per-request KV transfer errors kept, to quote the one that names a request


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
    fresh_line: bool = False                      # a line came while probing: probe again soon
    warning: str | None = None                    # the latest warning line (a traceback's exception): evidence
    tracebacks: TracebackWatch = field(default_factory=TracebackWatch)   # the exception that ends the latest
    transfer_errors: int = 0                      # per-request KV transfer errors in this invocation
    transfers: deque[tuple[float, int, str]] | None = None   # the latest, with their ranks (see note_transfer)
    learned: Learned = field(default_factory=Learned)   # what its checks learned once (the bootstrap port)
    without_metrics: bool = False                 # its /metrics answered 404 (no --enable-metrics) or no Prometheus
                                                  # text: not asked again in this start (its batch lines tell)
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
        self.attempt = Attempt(StartupWatch.of(cfg, self.serving, {}), learned=self._learned())
        self.started_by_us = False
        self.refused = False                        # the preflight refused it as it would run (Preflight)
        self.main_pid = 0                           # its main process, where its target knows it (0: unknown)
        self.judged = False                         # attached and judged once (status: a verdict exists)
        self.time_to_ready: float | None = None
        self.task: asyncio.Task | None = None
        self._session: Session | None = None
        self.address = LOOPBACK_ADDRESS             # where its ports are reached from its session's host
        self.planned: ServerCommand | None = None   # what it will run, as its target read it (during a preflight)
        self.memory_lock: MemoryLock | None = None  # how much memory it may pin, where its target tells
        self.wake = Wake()                          # a line or its unit's end wakes its wait or watch at once
        self.waiters = StepWaiters()                # whoever waits on its steps
        self.looks = RunLooks(self)                 # when it looks at the service where it runs
        self.tell = RunTeller(self)                 # its notices and checks, told to the faces
        self.failure_watch = FailureWatch(self)     # whether it failed, and why
        self.ready_wait = ReadyWait(self)           # its wait for ready, with its checks
        self.serving_watch = ServingWatch(self)     # its watch after ready
        self.metrics = ServerMetrics(self)          # its /metrics

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

    def _learned(self) -> Learned:
        """What a start knows before its checks learn anything: where its health is asked first."""
        return Learned(health_path=self.serving.health_path(self.cfg.ready.http))

    def fresh_attempt(self, *, collecting: bool = False) -> Attempt:
        """The next start's Attempt, begun now: numbered after the last one, its phases read by its serving engine
        and compared with its last successful run's (``collecting``: its lines held until its start is known)."""
        startup = StartupWatch.of(self.cfg, self.serving, self.w.baseline.get(self.name, {}))
        return Attempt(startup, self.attempt.number + 1, started_at=self.w.clock(), collecting=collecting,
                       learned=self._learned())

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
        """Start a fresh attempt and see it through (``ready_wait``, then ``serving_watch``); True if it was ready."""
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

    async def last_words(self) -> str | None:
        """Its run is over: let its last lines in, then its target's own words on its end, where it wrote some
        (None: its state says why). Nothing to wait for here; a target whose lines can come after its look says
        so (a unit's journal does)."""
        return None

    async def close(self) -> None:
        """Stop watching (its task is the orchestrator's to end): what it follows of its own. A unit's run
        follows nothing of its own (its host's tail brings its lines)."""

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
        self.waiters.stepped()

    def _settle(self, state: ServiceState, reason: str) -> None:
        """Move to ``state`` from wherever the run is: through STOPPING (or PENDING) where the table has no
        direct way."""
        if self.state is state:
            return
        if state not in ALLOWED[self.state]:
            self.transition(S.STOPPING if S.STOPPING in ALLOWED[self.state] else S.PENDING, reason)
        self.transition(state, reason)

    def refuse(self, reason: str) -> None:
        """The preflight refuses it as it would run (its unit, its pair, its host, its fabric): it fails, and the
        command that was to start it starts nothing else either (Preflight)."""
        self.refused = True
        self.transition(S.FAILED, reason)

    async def reaches(self, condition: Callable[[], bool]) -> None:
        """Until ``condition`` holds, looked at now and at each of its steps (:class:`StepWaiters`): a waiter on
        one run is woken by that run alone."""
        await self.waiters.reaches(condition)

    # -- what the checks see of it (vocabulary/checks.py's Probed) -------------------
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

    @property
    def proving(self) -> RouterProving:
        """A router: this attempt's proving (it remembers the model, the smoke failures, the pairs)."""
        if self.attempt.proving is None:
            self.attempt.proving = RouterProving(self)
        return self.attempt.proving


async def yield_every(count: int, every: int = YIELD_EVERY) -> None:
    """Let the event loop run every ``every`` items of a long synchronous batch."""
    if count % every == 0:
        await asyncio.sleep(0)
