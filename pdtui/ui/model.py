"""What the UI remembers about a bring-up between events, kept apart from the widgets.

Widgets redraw from these objects; the objects only change when an engine event
arrives, so what is drawn depends on events and the injected clock, never on
wall time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pdtui.config.fields import format_elapsed
from pdtui.engine.events import (
    CanaryResult,
    PairMatrix,
    PhaseStarted,
    ProbeResult,
    ServiceInfo,
    ServingFigures,
    StateChanged,
    UnitStatus,
)
from pdtui.engine.states import SERVING_STATES, ServiceState
from pdtui.engine.tracebacks import HEADER
from pdtui.faces.timeline import finished
from pdtui.servers import serving_named
from pdtui.support.text import inert
from pdtui.ui.format import BADGE_LABELS, throughput

THROUGHPUT_SAMPLES = 40   # the sparkline's history: 2 minutes at a sample each 3 s


class ElapsedClock:
    """Bring-up time: the engine's last reported ``elapsed``, advanced by the injected clock.

    Between events the counter keeps moving with ``clock``; a test passing a fixed
    clock therefore sees exactly the elapsed values its events carry.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._base = 0.0
        self._at = clock()
        self._frozen = False

    def sync(self, elapsed: float) -> None:
        """Take the engine's ``elapsed`` as the truth from now on (not while frozen: logs go on after Done)."""
        if self._frozen:
            return
        self._base = elapsed
        self._at = self._clock()

    def freeze(self, elapsed: float) -> None:
        """Stop the counter at ``elapsed`` (the bring-up has ended)."""
        self._frozen = False
        self.sync(elapsed)
        self._frozen = True

    def resume(self) -> None:
        """Let the counter run again (a retry started)."""
        self._at = self._clock()
        self._frozen = False

    def now(self) -> float:
        if self._frozen:
            return self._base
        return self._base + max(0.0, self._clock() - self._at)


@dataclass
class ServiceView:
    """One service as its panel shows it: state, timing and the line that explains a failure."""

    info: ServiceInfo
    state: ServiceState = ServiceState.PENDING
    since: float | None = None          # elapsed when its start command ran
    until: float | None = None          # elapsed when it reached a final state
    time_to_ready: float | None = None
    pinned: str | None = None           # inert failure line or reason, kept under the header
    started: bool = False               # pdtui started it at least once (it may be left running)
    checks: dict[str, ProbeResult] = field(default_factory=dict)   # latest result per readiness check
    up_since: float | None = None       # elapsed when its running unit started (it may be before pdtui's start)
    attached: bool = False              # found running, not started: no time to ready of its own
    last: dict[str, float] = field(default_factory=dict)   # each phase's length in the last successful run
    phases: list[tuple[str, float | None]] = field(default_factory=list)   # start-up phases begun: (name, journal time)
    phase_since: float | None = None    # elapsed when the phase under way began
    canary: CanaryResult | None = None   # a ready router's latest canary
    pairs: PairMatrix | None = None      # a router's prefill × decode pairs as last proven
    figures: ServingFigures | None = None   # a serving server's latest figures
    history: deque[float] = field(default_factory=lambda: deque(maxlen=THROUGHPUT_SAMPLES))   # its throughput
    degraded_at: float | None = None     # elapsed when it last turned degraded


    def apply(self, event: StateChanged) -> None:
        """Move to ``event.new`` and record the timing and explanation it carries."""
        new = event.new
        self.state = new
        if ServiceState.DEGRADED in (new, event.old) and new in SERVING_STATES:
            self.degraded_at = event.elapsed if new is ServiceState.DEGRADED else None
            self.pinned = inert(event.reason) if new is ServiceState.DEGRADED else None
            return    # the canary's verdict on a ready router: its time to ready stands
        self.degraded_at = None
        if new not in SERVING_STATES:
            self.figures = None
            self.history.clear()
        if new is ServiceState.PENDING:
            self.since = self.until = self.time_to_ready = None
            self.pinned = inert(event.reason) if event.reason else None   # "waiting for decode" (a restart)
            self.checks.clear()
            self.pairs = None
            self.phases.clear()
            self.phase_since = None
        elif new is ServiceState.STARTING:
            self.phases.clear()
            self.phase_since = None
            self.since, self.until, self.started, self.attached = event.elapsed, None, True, False
        elif new in (ServiceState.WAITING, ServiceState.STOPPING) and self.since is None:
            self.since, self.until = event.elapsed, None    # attached to a running unit, or stopping it
            self.attached = new is ServiceState.WAITING
            self.phases.clear()
            self.phase_since = None
        elif new.is_final:
            self.until = event.elapsed
        if new is ServiceState.READY:
            self.pinned = self.canary = None
            self.time_to_ready = event.time_to_ready
            if self.time_to_ready is None and self.since is not None and not self.attached:
                self.time_to_ready = event.elapsed - self.since
        elif new in (ServiceState.FAILED, ServiceState.TIMED_OUT, ServiceState.BLOCKED):
            # The line that decided, unless it is a traceback's header: the reason then names the exception.
            told = event.line is not None and HEADER not in event.line
            explanation = event.line if told else event.reason or event.line
            self.pinned = inert(explanation) if explanation else None

    def apply_canary(self, event: CanaryResult) -> None:
        self.canary = event

    def apply_figures(self, event: ServingFigures) -> None:
        self.figures = event
        self.history.append(throughput(event))

    def apply_phase(self, event: PhaseStarted) -> tuple[str, float, float] | None:
        """A start-up phase of the current invocation began; the phase it ended when that one was slow
        (three times its last successful run or more): (phase, seconds, last seconds)."""
        self.phases.append((event.phase, event.at))
        self.phase_since = event.elapsed if event.phase != "ready" else None
        ended = finished(self.phases)
        if ended is not None and serving_named(self.info.engine).slow(ended[1], self.last.get(ended[0])):
            return ended[0], ended[1], self.last[ended[0]]
        return None

    def running(self, now: float) -> float | None:
        """How long the phase under way has run at elapsed ``now`` (None when none is under way)."""
        if self.phase_since is None or self.state not in (ServiceState.STARTING, ServiceState.WAITING):
            return None
        return max(0.0, now - self.phase_since)

    def apply_probe(self, event: ProbeResult) -> None:
        """Remember the latest result of one readiness check."""
        self.checks[event.check] = event

    def apply_unit(self, event: UnitStatus) -> None:
        """The unit as systemd reported it: when it has run since, in the screen's elapsed time."""
        running = event.active in ("active", "reloading") and event.uptime is not None
        self.up_since = event.elapsed - event.uptime if running and event.uptime is not None else None

    def badge(self, now: float) -> str:
        """State label with elapsed time (time-to-ready once ready; the unit's uptime when found running)."""
        label = BADGE_LABELS[self.state]
        if self.state is ServiceState.DEGRADED and self.degraded_at is not None:
            return f"{label} {format_elapsed(now - self.degraded_at)}"
        if self.state is ServiceState.READY and self.time_to_ready is not None:
            return f"{label} {format_elapsed(self.time_to_ready)}"
        if self.state is ServiceState.READY and self.up_since is not None:
            return f"{label} up {format_elapsed(now - self.up_since)}"
        if self.since is None:
            return label
        end = self.until if self.until is not None else now
        return f"{label} {format_elapsed(end - self.since)}"

    @property
    def retryable(self) -> bool:
        return self.state in (ServiceState.FAILED, ServiceState.TIMED_OUT)
