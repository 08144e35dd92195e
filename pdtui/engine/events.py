"""Events: plain dataclasses the engine emits and the UI or headless printer consume.

They flow one way (engine -> subscribers). Subscribers must not mutate them and
must not call back into the engine except through its public methods
(``retry``, ``restart``, ``stop``).  ``elapsed`` is seconds since the bring-up began, read
from the orchestrator's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from pdtui.config.defaults import DEFAULT_ENGINE
from pdtui.engine.intent import RestartHow
from pdtui.engine.states import ServiceState
from pdtui.gpus.sampler import GpuSample
from pdtui.vocabulary.figures import Figures


class Step(str, Enum):
    """The stages of a bring-up, in order, as the plan strip shows them."""

    PREFLIGHT = "preflight"
    START_BACKENDS = "start backends"
    WAIT_READY = "wait for readiness"
    START_ROUTER = "start router"
    PROBE_ROUTER = "probe router"
    DONE = "ready"


class StepStatus(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


class LineKind(str, Enum):
    """How a log line is classified for display."""

    NORMAL = "normal"
    READY = "ready"      # matched the service's ready regex
    FAIL = "fail"        # matched a failure signature
    WARN = "warn"        # priority <= 4 or a WARNING line
    SYSTEM = "system"    # written by systemd (PID 1) about the unit


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """What the UI needs to draw a service before anything happens."""

    name: str
    role: str
    unit: str
    host: str
    gpus: tuple[int, ...]
    numa: int | None
    port: int | None
    after: tuple[str, ...]
    timeout: float
    restart_command: str = ""    # what a restart or stop from the UI runs, exactly, on ``host``
    stop_command: str = ""
    job: bool = False            # a Slurm job (``unit`` is its job's name, ``host`` its cluster)
    engine: str = DEFAULT_ENGINE  # the serving engine it runs (a router: whose router it is)
    rank: int = 0                # its node's rank in a server over several nodes
    server: str = ""             # a rank >= 1: the server it is a rank of (rank 0's name); drawn in that one's panel


@dataclass(frozen=True, slots=True)
class PlanReady:
    """First event of a bring-up: the deployment as it will be brought up."""

    deployment: str
    services: tuple[ServiceInfo, ...]
    steps: tuple[Step, ...]
    elapsed: float = 0.0
    title: str = "bringing up"   # what this run does: "bringing up", "watching", "restarting decode", "taking down"
    watching: bool = False       # only looks: nothing is started or stopped unless asked
    config: str = ""             # the config file it was read from, as named or found (every face says which)


@dataclass(frozen=True, slots=True)
class StepChanged:
    step: Step
    status: StepStatus
    detail: str = ""
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class StateChanged:
    service: str
    old: ServiceState
    new: ServiceState
    reason: str = ""
    line: str | None = None            # the log line that caused it (a failure or ready line)
    elapsed: float = 0.0
    time_to_ready: float | None = None  # seconds from start command (a job: from its start) to READY
    job_id: str | None = None          # a Slurm job's id and node (its first, on several), once known
    node: str | None = None


@dataclass(slots=True)
class LogRecord:
    """One journal line, already decoded to text (control characters intact: render inert).

    Read-only like every event, but not frozen: one is made per log line, and a
    frozen dataclass costs three times as much to build.
    """

    text: str
    kind: LineKind = LineKind.NORMAL
    timestamp: float | None = None     # seconds since the epoch, from the journal
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class LogLines:
    """A batch of lines of one service, in journal order."""

    service: str
    lines: tuple[LogRecord, ...]
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class PhaseStarted:
    """A start-up phase of a service's current invocation began (names in phases.py).

    ``at`` is the journal timestamp of the line that began it (seconds since
    the epoch): phases read from a backfilled history still get their true
    durations, which ``elapsed`` (when pdtui read the line) would not give.
    """

    service: str
    phase: str
    elapsed: float = 0.0
    at: float | None = None


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """The outcome of one readiness check or router probe step."""

    service: str
    check: str                 # "log", "http /health", "tcp", "readiness", "workers", "smoke" ...
    ok: bool
    detail: str = ""
    latency: float | None = None
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class PairResult:
    """One prefill × decode pair proven directly, bypassing the router (SGLang's PD request to both)."""

    prefill: str
    decode: str
    ok: bool
    detail: str
    latency: float | None = None


@dataclass(frozen=True, slots=True)
class PairMatrix:
    """Every pair behind a router as last proven, prefill by prefill (its ``pairs`` check on one line)."""

    service: str               # the router
    pairs: tuple[PairResult, ...]
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class RoutedWorker:
    """One worker a router lists: the configured backend it is (None: one the config does not name)."""

    url: str
    role: str
    healthy: bool
    service: str | None
    drop: str = ""            # for a worker the config does not name: the command that takes it out of the router


@dataclass(frozen=True, slots=True)
class RouterBackends:
    """A router's workers as its ``/workers`` last listed them, against the config (drift while it runs): the
    configured backends it lacks and the workers it has that the config does not name. Told when it changes."""

    service: str               # the router
    workers: tuple[RoutedWorker, ...]
    lacking: tuple[str, ...]   # configured backends it does not list
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class PreflightFinding:
    """One of the preflight's findings about the servers as they will run: the two sides of a pair that disagree,
    or servers of one host in each other's way. ``values`` and ``sources``: each side's, the one it fails first."""

    level: str                   # error (refused unless --force) | warning (refused with strict: true)
    check: str                   # pair | host | running | fabric | flags
    service: str
    host: str
    setting: str
    values: tuple[str, ...]
    sources: tuple[str, ...]
    text: str
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class Drained:
    """A backend's drain once it is over: taken out of its routers, its requests finished (or cut at the drain's
    timeout), then ``back`` in them, ``stopped``, or ``left out`` (it failed after its restart, or a pair with it
    did)."""

    service: str
    routers: tuple[str, ...]
    outcome: str                 # back | stopped | left out
    idle_after: float | None     # seconds from the take-out until no request was left (or the timeout)
    cut: int | None              # requests it still held then, cut: KV transfers included (None: not known)
    out_for: float | None        # seconds it was out of its routers, take-out to back in (None: not back)
    elapsed: float = 0.0
    cut_in_transfer: int | None = None   # ... of them held for a KV transfer (None: its figures do not say)


@dataclass(frozen=True, slots=True)
class CanaryResult:
    """A ready router's canary: one tiny generation through it, every ``canary`` interval."""

    service: str
    ok: bool
    detail: str = ""
    latency: float | None = None
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class ServingFigures:
    """A ready server's figures, sampled every few seconds while its panel is shown.

    ``source`` is ``metrics`` (its ``/metrics``) or ``log`` (its batch lines:
    no TTFT); ``hint`` then says what would give the rest.
    """

    service: str
    source: str
    figures: Figures
    hint: str = ""
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class UnitStatus:
    """A unit as systemd last reported it, told when it changes."""

    service: str
    active: str                 # ActiveState: active, activating, inactive, failed, ...
    sub: str                    # SubState: running, dead, ...
    invocation: str = ""
    since: str = ""             # ActiveEnterTimestamp as systemd prints it
    uptime: float | None = None  # seconds since then, when that timestamp could be read
    main_pid: int = 0
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A service's Slurm job as Slurm last reported it, told when it changes."""

    service: str
    job_id: str
    state: str                   # Slurm's: PENDING, RUNNING, FAILED, OUT_OF_MEMORY, ...
    reason: str = ""             # Slurm's reason: Resources, Priority, NonZeroExitCode, ...
    node: str = ""               # its node (its first, on several), once it runs
    gpus: tuple[int, ...] = ()   # the GPU indices Slurm gave it there
    exit_code: str = ""          # once it ended: "1:0"
    nodes: tuple[tuple[str, tuple[int, ...]], ...] = ()   # a job over several nodes: each node and its GPUs, in rank order
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class HostStatus:
    host: str
    status: str                # "connecting", "connected", "reconnecting", "unreachable" (may pass), "error", "closed"
    detail: str = ""
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class Notice:
    """A preflight finding or other message for the user."""

    level: str                 # "info", "warning", "error"
    text: str
    service: str | None = None
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class ServerFailed:
    """A server over several nodes failed as one: ``cause`` is the rank whose own failure took it down (the
    others may have failed too, of its loss, before it told its own cause)."""

    service: str               # the server (its rank 0's name)
    cause: str                 # the rank's service: ``decode@1``, or the server's own name for rank 0
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class Done:
    """Last event of a bring-up; told again when a crash, a retry or a restart changes the outcome.

    ``ready_at`` and ``failed_at`` tell a failure after ready from a bring-up that never got there: the deployment
    was ready at ``ready_at`` and a service failed at ``failed_at`` (both seconds since the bring-up began, as
    ``elapsed``); ``elapsed`` is when the outcome was told, a moment after the failure it tells.
    """

    ok: bool
    exit_code: int
    time_to_ready: dict[str, float] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)   # service -> reason: what failed or timed out
    left_running: tuple[str, ...] = ()                        # units pdtui started and left running
    elapsed: float = 0.0
    waiting: tuple[str, ...] = ()       # services not yet decided when the outcome was told (no failure of theirs)
    blocked: dict[str, str] = field(default_factory=dict)    # service -> why it was never started (what it waits on)
    ready_at: float | None = None       # when the deployment was last all ready (None: not since a retry or restart)
    failed_at: float | None = None      # when a service first failed after that (None: none has; a degraded router
                                        # is no failure: its state tells it)


Event = (PlanReady | StepChanged | StateChanged | LogLines | PhaseStarted | ProbeResult | PairMatrix | RouterBackends
         | PreflightFinding | Drained | CanaryResult | ServingFigures | UnitStatus | JobStatus | HostStatus | GpuSample
         | Notice | ServerFailed | Done)


class EventSource(Protocol):
    """What a front end (TUI, headless printer) drives: the orchestrator, or a fake in tests."""

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        """Call ``callback`` with every event, in order, on the event loop's thread."""
        ...

    async def run(self) -> Done:
        """Bring the deployment up; the last event emitted is the returned Done."""
        ...

    def retry(self, service: str) -> bool:
        """Start a failed or timed-out service (and what it blocked) again.

        Returns False when the service is not in a state that can be retried.
        A retry emits StateChanged events and, when it settles, a new Done.
        """
        ...

    def restart(self, service: str, how: RestartHow = RestartHow.DRAIN) -> bool:
        """Restart a service's unit; what comes after it is proven again once it is back (a backend under
        serving routers drained first, or its whole role rolled, as ``how`` says).

        Returns False when it cannot be restarted now (it is starting or stopping).
        """
        ...

    def stop(self, service: str) -> bool:
        """Stop a service's unit (and wait for its GPUs' memory to be released). False when it cannot be now."""
        ...

    def prove_pairs(self) -> bool:
        """Prove every prefill × decode pair behind each serving router again (PairMatrix); False when no router
        serves."""
        ...

    def show_figures(self, services: Collection[str]) -> None:
        """The services whose panels are shown: only theirs are sampled (ServingFigures) while they serve."""
        ...

    async def close(self) -> None:
        """Stop watching (tails, probes, connections). Never stops a unit."""
        ...
