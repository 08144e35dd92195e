"""The bring-up: preflight -> start backends -> wait for readiness -> start router -> probe; and the life after.

The orchestrator wires the deployment together: one session per host or
cluster (its target's, from the :class:`~pdtui.engine.session.Targets` it is
handed: targets/registry.py's, by the commands), following its services'
output, the preflight (preflight.py), one :class:`ServiceRun` per service
brought up by its own task once the services it comes ``after`` are ready, log
lines handed out in batches, and the outcome. It never asks which kind of
target a service runs on.
What it is asked to do is an :class:`Intent` (``up``, ``status``, ``restart``,
``down``): each becomes an :class:`Action` per service; what changes running
services (a restart, a stop, a retry, down, the pairs proven again) is the
lifecycle's (lifecycle.py), whose runs it launches.
A service is ready only when every check holds for the unit's *current
invocation* (see service_run.py); a failed one blocks everything after it, so
nothing waits forever. All progress is told through events (see events.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from pdtui.config import BACKEND_ROLES, Deployment
from pdtui.config.fields import format_duration
from pdtui.engine.events import (
    Done,
    Event,
    HostStatus,
    LogLines,
    Notice,
    PlanReady,
    Step,
    StepStatus,
)
from pdtui.engine.figures import FiguresWatch
from pdtui.engine.intent import UP, Action, Intent, RestartHow, Verb
from pdtui.engine.lifecycle import BAD_OUTCOMES, Lifecycle
from pdtui.engine.preflight import Preflight, finding, overridden, refuses
from pdtui.engine.ranks import RankWatch
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.session import Session, Targets
from pdtui.engine.states import FINAL_STATES, ServiceState
from pdtui.engine.steps import StepRecord, split, step_statuses
from pdtui.engine.timing import DEFAULT_TIMING, Timing
from pdtui.support.exits import EXIT_FAILED, EXIT_OK
from pdtui.support.redact import Redactor

__all__ = ["Orchestrator", "Timing"]

S = ServiceState

# Not decided yet: a service in one of these when the outcome is told is waiting, not failed.
UNDECIDED = frozenset({S.PENDING, S.STARTING, S.QUEUED, S.WAITING, S.STOPPING})
UNDECIDED_OR_BLOCKED = UNDECIDED | {S.BLOCKED}      # not failures: a blocked service never started
ENDS_A_BRING_UP = frozenset({S.FAILED, S.TIMED_OUT})     # one of these decides a bring-up: it failed
DOWN = frozenset({S.STOPPED, S.FAILED})                  # taking down: stopped, or would not stop
WATCHED_UNSETTLED = frozenset({S.WAITING, S.QUEUED})     # status: still starting, once judged it is settled
NOT_RUNNING_YET = frozenset({S.PENDING, S.STARTING, S.QUEUED})   # nothing of its own to ask yet


class Orchestrator:
    """Brings one deployment up and tells everything it does through events."""

    def __init__(self, deployment: Deployment, targets: Targets, *, clock: Callable[[], float] = time.monotonic,
                 smoke: bool = True, canary: bool = True, pairs: bool | None = None, timing: Timing = DEFAULT_TIMING,
                 intent: Intent = UP, baseline: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.deployment = deployment
        if intent.services:     # a server over several nodes, named by any of its ranks: every rank
            intent = dataclasses.replace(intent, services=tuple(dict.fromkeys(
                rank for name in intent.services for rank in deployment.ranks_of(name))))
        self.intent = intent
        self.targets = targets          # every kind of target, handed in: the engine imports none
        self.clock = clock
        self.smoke = smoke
        self.canary = canary
        self.pairs = pairs          # each prefill × decode pair proven directly: always, never, None: when several
        self.timing = timing
        self.baseline = baseline or {}       # each service's phase lengths in its last successful run
        self._subscribers: list[Callable[[Event], None]] = []
        self._t0 = clock()
        self._sessions: dict[str, Session] = {}
        self._checks: Preflight | None = None
        self._runs = {name: targets.new_run(cfg) for name, cfg in deployment.services.items()}
        self._groups = split(list(self._runs.values()))     # backends, routers
        self._on_host: dict[str, list[ServiceRun]] = {}       # the runs of each host, in config order
        for run in self._runs.values():
            self._on_host.setdefault(run.cfg.host, []).append(run)
        self._tails: list[asyncio.Task] = []
        self._figures = FiguresWatch(deployment, self._runs, emit=self.emit, clock=clock, elapsed=self.elapsed,
                                     interval=timing.figures_poll)
        self._steps = StepRecord()       # as told: a step once done stays so when a service fails after it
        self._preflight = StepStatus.PENDING
        self._changed: asyncio.Event | None = None  # set and let go at every state change, when waited on (until)
        self._flush_handle: asyncio.TimerHandle | None = None
        self._steps_handle: asyncio.Handle | None = None
        self._done_task: asyncio.Task | None = None
        self._last_done: Done | None = None
        self._lifecycle = Lifecycle(deployment, self._runs, intent, self)
        self._rank_watches = [RankWatch([self._runs[n] for n in deployment.ranks_of(name)], self)
                              for name, cfg in deployment.services.items() if cfg.nnodes > 1 and not cfg.follower]

    # -- the public face ---------------------------------------------------
    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._subscribers.append(callback)

    async def run(self) -> Done:
        """Do what the intent asks; returns (and has emitted) the Done that ends it.

        Journal tails and watches keep running afterwards (a front end keeps
        showing logs and crashes) until :meth:`close`.
        """
        verb = self.intent.verb
        self._begin()
        self._follow_journals()
        for watch in self._rank_watches if verb in (Verb.UP, Verb.RESTART) else ():    # looking never stops
            watch.start()
        await self._preflight_hosts(sample_gpus=True)
        refused = {r.name for r in self._runs.values() if r.state in BAD_OUTCOMES}    # by the preflight
        if verb is Verb.DOWN and self.intent.services:
            await self._judge_all()     # the rest go on as they run: each is judged, the routers' backends known
            self._lifecycle.take_out_and_stop([self._runs[name] for name in self.intent.services])
        elif verb is Verb.DOWN:
            self._lifecycle.take_down(self._pending())
        elif verb is Verb.STATUS:
            await self._judge_all()
        elif verb is Verb.RESTART:
            await self._judge_all()     # each service as it runs now: what the restart changes is then told
            self._lifecycle.restart([self._runs[name] for name in self.intent.services if name not in refused],
                                    with_dependents=self.intent.with_dependents)
        else:
            for run in self._pending():
                self.launch(run, Action.RESTART if self.intent.fresh else Action.START)
        return await self._until_done()

    async def _judge_all(self) -> None:
        """Attach to every service the preflight let through and wait until each has been judged once."""
        for run in self._pending():
            self.launch(run, Action.ATTACH, wait=False)
        await self.until(lambda: all(r.state in FINAL_STATES or r.judged for r in self._runs.values()))

    def _pending(self) -> list[ServiceRun]:
        """The runs the preflight let through."""
        return [run for run in self._runs.values() if run.state is S.PENDING]

    def launch(self, run: ServiceRun, action: Action, *, wait: bool = True, reason: str = "") -> None:
        """Give ``run`` a new task doing ``action`` (once what it comes after is ready, when ``wait``)."""
        if run.task and not run.task.done():
            run.task.cancel()
        if run.state is not S.PENDING:
            run.transition(S.PENDING, reason)
        run.task = asyncio.create_task(self._bring_up(run, action, wait=wait), name=f"{action.value} {run.name}")
        run.task.add_done_callback(functools.partial(self._ended, run))

    def _ended(self, run: ServiceRun, task: asyncio.Task) -> None:
        """A run's task that ended on an exception nobody expected (a bug, in pdtui or a target) fails its service,
        saying so: without this the bring-up would wait for it for ever."""
        if task.cancelled() or (exc := task.exception()) is None:
            return
        if run.state not in BAD_OUTCOMES and run.state is not S.STOPPED:
            run.transition(S.FAILED, f"pdtui internal error: {type(exc).__name__}: {exc}")

    # -- what a face asks (events.EventSource), done by the lifecycle ------------------
    def retry(self, service: str) -> bool:
        return self._lifecycle.retry(service)

    def restart(self, service: str, how: RestartHow = RestartHow.DRAIN) -> bool:
        return self._lifecycle.restart_one(service, how)

    def stop(self, service: str) -> bool:
        return self._lifecycle.stop_one(service)

    def prove_pairs(self) -> bool:
        return self._lifecycle.prove_pairs(self._groups[1])

    def show_figures(self, services: Collection[str]) -> None:
        """Sample the serving figures of these services (those a face shows), every few seconds while they serve."""
        self._figures.show(services)

    def tell_outcome_again(self) -> None:
        """After a bring-up ended, a crash or a retry changes the outcome: tell the new one when decided."""
        if self._last_done is not None and (self._done_task is None or self._done_task.done()):
            self._done_task = asyncio.create_task(self._until_done())

    async def close(self) -> None:
        """Stop watching: end tails, probes and connections. Never stops a unit."""
        tasks = [*self._tails, *(r.task for r in self._runs.values() if r.task)]
        tasks += [self._done_task] if self._done_task is not None else []
        tasks += self._checks.samplers if self._checks is not None else []
        tasks += self._lifecycle.asked
        tasks += [watch.task for watch in self._rank_watches if watch.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for run in self._runs.values():
            await run.close()
        await self._figures.close()
        self._flush_logs()
        for session in self._sessions.values():
            await session.close()

    # -- what its runs use of it (service_run.Bringup) ----------------------------
    def elapsed(self) -> float:
        return round(self.clock() - self._t0, 3)

    def beat_origin(self) -> float:
        return self._t0

    @property
    def peers(self) -> dict[str, ServiceRun]:
        return self._runs

    def emit(self, event: Event) -> None:
        """Hand ``event`` to every face, a secret in its text masked: a server's lines are masked as they are read
        (run_lines.py), and what else comes from outside (an HTTP body quoted in a probe's detail, a host's stderr
        in a failure's reason) here, before a face, the history or the web page sees it: the deployment's secret
        values only, as pdtui's own words name secrets' flags without a value."""
        if not isinstance(event, LogLines):
            event = _redacted(event, self.deployment.redactor)
        for callback in list(self._subscribers):
            callback(event)

    def _host_status(self, host: str, status: str, detail: str = "") -> None:
        """A host's status as the host tells it; one the preflight keeps trying to reach says for how long.

        The host tells once that it cannot be reached: with the preflight's horizon
        added, that is the one line saying what failed and how long pdtui goes on.
        """
        checks = self._checks
        if status == "connected" and checks is not None:
            checks.reached(host)
        left = checks.reaching_for(host) if checks is not None else -math.inf
        if status == "unreachable" and left > 0:
            detail = f"{detail}; trying again for up to {format_duration(round(left))}"
        self.emit(HostStatus(host, status, detail, self.elapsed()))

    # -- hosts and journals -------------------------------------------------
    async def preflight(self) -> bool:
        """Only the preflight (hosts reachable, units present, GPUs): touches no unit. True when it passed."""
        self._begin()
        await self._preflight_hosts(sample_gpus=False)
        return self._preflight is StepStatus.DONE

    def _begin(self) -> None:
        self._t0 = self.clock()
        services = tuple(r.info(self.deployment) for r in self._runs.values())
        steps = () if self.intent.verb is Verb.DOWN else tuple(Step)
        self.emit(PlanReady(self.deployment.name, services, steps, title=self.intent.title,
                             watching=self.intent.watching, config=self.deployment.source))
        self._update_steps()
        self._sessions = self.targets.open_sessions(self.deployment, self._on_host, self._host_status,
                                                    command_timeout=self.timing.command_timeout, clock=self.clock)
        for run in self._runs.values():
            run.wire(self, self._sessions[run.cfg.host])

    def _follow_journals(self) -> None:
        for name, session in self._sessions.items():
            follow = session.follow(self._on_host[name], on_problem=self._tail_problem)
            if follow is not None:
                self._tails.append(asyncio.create_task(follow, name=f"output {name}"))

    async def _preflight_hosts(self, *, sample_gpus: bool) -> None:
        """Reach every host and look at every service before touching anything (see preflight.py)."""
        self._preflight = StepStatus.RUNNING
        self._update_steps()
        self._checks = Preflight(self.deployment, self._sessions, self._on_host, verb=self.intent.verb,
                                 clock=self.clock, emit=self.emit, elapsed=self.elapsed, force=self.intent.force,
                                 restarting=self.intent.services if self.intent.verb is Verb.RESTART else ())
        ok = await self._checks.run(sample_gpus=sample_gpus)
        self._preflight = StepStatus.DONE if ok else StepStatus.FAILED
        self._update_steps()

    def _tail_problem(self, message: str) -> None:
        self.emit(Notice("warning", message, None, self.elapsed()))

    def schedule_flush(self) -> None:
        """Lines are pending: hand out every run's lines together, a batch interval from now."""
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(self.timing.log_batch, self._flush_logs)

    def _flush_logs(self) -> None:
        self._flush_handle = None
        for run in self._runs.values():
            run.lines.flush()

    # -- one service ----------------------------------------------------------
    async def _bring_up(self, run: ServiceRun, action: Action, *, wait: bool = True) -> None:
        """Once what ``run`` comes after is ready (when ``wait``), its life; blocked when one of those failed."""
        if wait and run.cfg.after and not await self._may_start(run):
            return
        if await run.bring_up(action):
            self.tell_outcome_again()     # it failed after ready: the outcome changed

    async def _may_start(self, run: ServiceRun) -> bool:
        """Until what ``run`` comes after is ready: False (and ``run`` blocked) when one of those failed, or when a
        router's backends refuse each other as they run. Its helpers (the looks at ``run``, the backends'
        accounts) end with the wait: the life that follows keeps none of them."""
        deps = [self._runs[rank] for d in run.cfg.after for rank in self.deployment.ranks_of(d)]    # every node
        looking = asyncio.create_task(run.keep_looking())
        checking = run.cfg.is_router and self.intent.verb in (Verb.UP, Verb.RESTART)
        infos: dict[str, asyncio.Task] = {}
        try:
            if checking:    # each backend's account is asked once it runs: not in the start's busy turns
                await self.until(lambda: all(d.state not in NOT_RUNNING_YET for d in deps))
                infos = {d.name: asyncio.create_task(self._server_info(d)) for d in deps
                         if d.cfg.role in BACKEND_ROLES and d.cfg.port and not d.cfg.follower}   # rank 0 tells
            ready = S.READY     # looked up once: the condition is looked at after every change
            await self.until(lambda: all(d.state is ready for d in deps) or any(d.state in BAD_OUTCOMES for d in deps))
            bad = [d for d in deps if d.state in BAD_OUTCOMES] or [d for d in deps if d.state is not S.READY]
            if bad:
                run.transition(S.BLOCKED, f"{bad[0].name} {bad[0].state.value.replace('_', ' ')}")
                return False
            refused = await self._pairs_as_they_run(run, infos) if checking else None
            if refused:
                run.transition(S.BLOCKED, refused)
                return False
            return True
        finally:
            _let_go((looking, *infos.values()))

    async def _server_info(self, backend: ServiceRun) -> Mapping[str, Any] | None:
        """A backend's own account of how it runs, read as soon as its lines say its HTTP server is up (its
        arguments are fixed from then on, while it still warms up): off the router's critical path. Not asked
        before (each ask is a line in its log, and a connection over SSH); a server whose lines never say so is
        asked once it is ready. Woken by the backend's own steps alone, once (:meth:`ServiceRun.reaches`)."""
        def answers() -> bool:
            state = backend.state
            return state is S.READY or state is S.WAITING and backend.attempt.phases.serving_http \
                or state in BAD_OUTCOMES

        while True:
            await backend.reaches(answers)
            if backend.state in BAD_OUTCOMES:
                return None
            assert backend.cfg.port is not None
            info = await backend.serving.server_info(backend.prober, backend.cfg.port, backend.address)
            if info is not None or backend.state is S.READY:
                backend.learned.server_info = info
                return info
            with contextlib.suppress(TimeoutError):      # not answering yet: again after a poll, or at its next step
                async with asyncio.timeout(self.timing.poll):
                    await backend.waiters.next_step()

    async def _pairs_as_they_run(self, router: ServiceRun, infos: Mapping[str, asyncio.Task]) -> str | None:
        """Before a router starts: its prefills against its decodes as each ready server says it runs (its
        ``/server_info``); the first refusal's words (None: none, forced, or the router runs already)."""
        backends = [self._runs[n] for n in router.cfg.after if n in infos]
        asked = [infos[b.name] for b in backends]
        if not all(task.done() for task in asked):     # mostly read long since: no loop turn spent on a gather
            await asyncio.wait(asked)
        read = [task.result() for task in asked]
        told = {b.name: info for b, info in zip(backends, read, strict=True) if info}
        refused = None
        for p in (b for b in backends if b.cfg.role == "prefill" and b.name in told):
            for d in (b for b in backends if b.cfg.role == "decode" and b.name in told):
                for found in p.serving.running_mismatches((p.name, told[p.name]), (d.name, told[d.name])):
                    self.emit(finding(found, d, self.elapsed()))
                    if not refuses(found, self.deployment) or router.running:
                        continue    # a warning, or a router that serves already (blocking it would stop nothing)
                    if self.intent.force:
                        self.emit(overridden(found, router.name, self.elapsed()))
                    else:
                        refused = refused or found.text
        return refused

    def changed(self) -> None:
        """A run changed state: wake the waiters; the steps are updated once the loop's turn is over.

        A fleet's thousand services change state in bursts: the steps are
        derived from every service, so once per burst, not once per change.
        """
        self._notify_changed()
        if self._steps_handle is None:
            self._steps_handle = asyncio.get_running_loop().call_soon(self._update_steps)

    # -- the whole ---------------------------------------------------------------
    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition`` holds; it is looked at after every state change.

        A change sets the Event the waiters wait on and lets it go (the next
        waiter makes a fresh one): every waiter wakes in the same turn of the
        loop, changes made before it runs share its look, and a change costs
        nothing more while the woken have not yet waited again (a fleet's
        services change state thousands of times a second while 128 routers
        wait). After a
        Condition's notify_all each waiter takes its lock in turn, handed on a
        loop turn at a time: the last of 129 looked 128 turns late.
        """
        while not condition():
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()

    def _notify_changed(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _decided(self) -> bool:
        """The outcome is known: every service settled, or one failed and all it blocks is marked blocked already.

        Watching (status), a service whose unit is still starting (or whose job
        still waits in Slurm's queue) is settled once it has been judged; taking
        down, once it is stopped (or would not stop).

        Looked at after every change of a fleet's thousand services: each state is compared with sets made once
        (an enum member looked up on its class costs as much as the rest of the comparison).
        """
        runs = list(self._runs.values())
        verb = self.intent.verb
        if self._lifecycle.draining:
            return False        # a backend is out of its routers until it is proven and put back
        if any(watch.unsettled for watch in self._rank_watches):
            return False        # a server's rank failed: its other ranks are being stopped
        if verb is Verb.DOWN and self.intent.services:
            return all(r.state in DOWN if r.name in self.intent.services
                       else r.state in FINAL_STATES or r.judged for r in runs)
        if verb is Verb.DOWN:
            return all(r.state in DOWN and (r.task is None or r.task.done()) for r in runs)
        if verb is Verb.STATUS:
            return all(r.state in FINAL_STATES or (r.judged and r.state in WATCHED_UNSETTLED) for r in runs)
        pending, by_name = S.PENDING, self._runs
        if any(r.state is pending and any(by_name[d].state in BAD_OUTCOMES for d in r.cfg.after) for r in runs):
            return False
        return all(r.state in FINAL_STATES for r in runs) or any(r.state in ENDS_A_BRING_UP for r in runs)

    async def _until_done(self) -> Done:
        """Wait until the outcome is decided, then tell it."""
        await self.until(self._decided)
        self._flush_logs()
        self._update_steps()       # the steps as they are now, told before the outcome
        done = self._make_done()
        self._last_done = done
        self.emit(done)
        return done

    def _make_done(self) -> Done:
        runs = list(self._runs.values())
        goal = {r.name: self._goal(r) for r in runs}
        ok = all(r.state is goal[r.name] for r in runs)
        ttr = {r.name: r.time_to_ready for r in runs if r.state is S.READY and r.time_to_ready is not None}
        missed = [r for r in runs if r.state is not goal[r.name]]
        failures = {r.name: r.reason or r.state.value for r in missed if r.state not in UNDECIDED_OR_BLOCKED}
        blocked = {r.name: r.reason or r.state.value for r in missed if r.state is S.BLOCKED}
        waiting = tuple(r.name for r in missed if r.state in UNDECIDED)
        return Done(ok, EXIT_OK if ok else EXIT_FAILED, ttr, failures, self.left_running(), self.elapsed(), waiting,
                    blocked, self._steps.ready_at, self._steps.failed_at)

    def _goal(self, run: ServiceRun) -> ServiceState:
        """What the outcome wants of a service: stopped when taken down (all, or it is named), else ready."""
        if self.intent.verb is Verb.DOWN and (not self.intent.services or run.name in self.intent.services):
            return S.STOPPED
        return S.READY

    def left_running(self) -> tuple[str, ...]:
        """Units this bring-up started that were running when last looked at (a rank's named with its host: its
        server's unit runs on each of its nodes)."""
        return tuple(f"{r.unit} on {r.cfg.host}" if r.cfg.nnodes > 1 else r.unit
                     for r in self._runs.values() if r.started_by_us and r.running)

    def _update_steps(self) -> None:
        if self._steps_handle is not None:
            self._steps_handle.cancel()
            self._steps_handle = None
        if self.intent.verb is Verb.DOWN:
            return    # taking down has no bring-up steps
        for change in self._steps.update(step_statuses(self._preflight, *self._groups), self.elapsed()):
            self.emit(change)


def _let_go(tasks: Iterable[asyncio.Task]) -> None:
    """Helpers of a run's wait that it no longer needs: those under way cancelled (each ends at the loop's next
    turn, and the start does not wait for that: in a fleet's busy loop a turn takes milliseconds), the error of
    one that ended retrieved (told where it mattered)."""
    for task in tasks:
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()


def _redacted(event: Any, redactor: Redactor) -> Any:
    """``event`` with each of the deployment's secret values in its text fields (a text, a tuple or a mapping of
    texts) masked; itself when it held none."""
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        if isinstance(value, str):
            masked: Any = redactor.redact(value, by_name=False)
        elif isinstance(value, tuple) and value and all(isinstance(item, str) for item in value):
            masked = tuple(redactor.redact(item, by_name=False) for item in value)
        elif isinstance(value, dict) and value and all(isinstance(item, str) for item in value.values()):
            masked = {key: redactor.redact(item, by_name=False) for key, item in value.items()}
        else:
            continue
        if masked != value:
            changes[field.name] = masked
    return dataclasses.replace(event, **changes) if changes else event
