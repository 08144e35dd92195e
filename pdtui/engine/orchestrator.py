"""The bring-up: preflight -> start backends -> wait for readiness -> start router -> probe.

Each service is brought up by its own task, which first waits for the services
it comes ``after``. A service is ready only when every check holds for the
unit's *current invocation*: its ready log line, its HTTP/TCP checks (the
router: the end-to-end probe), and no failure line. A failure line or a failed
unit fails it at once, and everything after it is blocked, so nothing waits
forever. All progress is told through events (see events.py).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

from pdtui.backoff import Backoff
from pdtui.config import Deployment, ServiceConfig
from pdtui.engine.events import (
    Done,
    Event,
    HostStatus,
    LineKind,
    LogLines,
    LogRecord,
    Notice,
    PlanReady,
    ProbeResult,
    ServiceInfo,
    StateChanged,
    Step,
    StepChanged,
    StepStatus,
)
from pdtui.engine.gpus import GpuSampler, Inventory, host_inventories, preflight_findings
from pdtui.engine.host_session import HostSession
from pdtui.engine.probes import LOOPBACK, Backend, Check, RouterProbe, bootstrap_port, http_check, tcp_check
from pdtui.engine.readiness import FailureCandidate, LineJudge
from pdtui.engine.signatures import BOOTSTRAP, Severity, Signature, signatures_for
from pdtui.engine.states import FINAL_STATES, ServiceState, check_transition
from pdtui.engine.steps import step_statuses
from pdtui.gpu import sampler_argv
from pdtui.hosts.base import Host, HostDisconnected, HostError, HostUnreachable
from pdtui.plan import format_duration
from pdtui.systemd import JournalEntry, parse_cat
from pdtui.unit_drift import parse_installed, service_drift

S = ServiceState
HostFactory = Callable[..., Host]

# systemd's own lines that mean the unit's process ended or the unit changed state.
UNIT_END_MARKERS = ("Main process exited", "Failed with result", "Deactivated successfully", "Stopped ")
BAD_OUTCOMES = frozenset({S.FAILED, S.TIMED_OUT, S.BLOCKED})
# An unreachable host is tried again during preflight with this backoff, until its services' longest timeout.
PREFLIGHT_RETRY, PREFLIGHT_RETRY_MAX = 0.5, 5.0
# A host's unit looks take at most about 1/(1 + LOOK_REST) of its time (see Orchestrator._beat).
LOOK_REST = 4.0
# After ready, health must fail this many checks in a row (over the service's unhealthy_after) to fail it.
HEALTH_FAILS_IN_A_ROW = 3
# A Python exception's own line, the last of a traceback: what a warning quotes.
_EXCEPTION_LINE = re.compile(r"^(?:\[[^\]]*\] )?[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b")


@dataclass(frozen=True, slots=True)
class Timing:
    """How often things are looked at. Tests shorten these."""

    poll: float = 0.5          # HTTP/TCP/router probes while waiting
    watch_poll: float = 10.0   # the health check of a ready service
    line_probe_gap: float = 0.05   # a new line of a service being probed brings its next probe this close
    unit_poll: float = 2.0     # `systemctl show` while waiting (systemd's own lines wake it sooner)
    settle: float = 0.3        # after a first failure line, wait this long for a more telling one
    log_batch: float = 0.05    # log lines are handed to subscribers in batches this often
    command_timeout: float = 30.0


@dataclass
class ServiceRun:
    """Everything the orchestrator knows about one service during a bring-up."""

    cfg: ServiceConfig
    judge: LineJudge
    state: ServiceState = S.PENDING
    attempt: int = 0
    started_at: float | None = None
    invocation: str | None = None
    collecting: bool = False                      # start issued, invocation not yet known
    buffered: list[JournalEntry] = field(default_factory=list)
    backfilled: set[str] = field(default_factory=set)
    log_ok: bool = False
    failure: FailureCandidate | None = None
    failure_at: float | None = None
    unit_problem: str | None = None
    unit_dirty: bool = False
    active_state: str = ""
    started_by_us: bool = False
    pending_lines: list[LogRecord] = field(default_factory=list)
    last_checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    reason: str = ""
    time_to_ready: float | None = None
    router_probe: RouterProbe | None = None
    next_unit_check: float = 0.0
    fresh_line: bool = False                      # a line came while probing: probe again soon
    warning: str | None = None                    # the latest warning line (a traceback's exception): evidence
    in_traceback: bool = False                    # a traceback began: its exception line is the warning to keep
    transfer_errors: int = 0                      # per-request KV transfer errors in this invocation
    last_transfer: tuple[float, str] | None = None
    bootstrap: int | None = None                  # the prefill's bootstrap port, once known
    unhealthy_since: float | None = None          # after ready: when health began failing, and how often since
    unhealthy_count: int = 0

    @property
    def name(self) -> str:
        return self.cfg.name

    def reset(self) -> None:
        """Forget the previous attempt (for a retry)."""
        self.invocation, self.collecting, self.log_ok, self.fresh_line = None, False, False, False
        self.failure = self.failure_at = self.unit_problem = self.router_probe = None
        self.warning, self.in_traceback, self.transfer_errors, self.last_transfer = None, False, 0, None
        self.bootstrap, self.unhealthy_since, self.unhealthy_count = None, None, 0
        self.buffered.clear()
        self.backfilled.clear()
        self.last_checks.clear()


class Orchestrator:
    """Brings one deployment up and tells everything it does through events."""

    def __init__(self, deployment: Deployment, host_factory: HostFactory, *, clock: Callable[[], float] = time.monotonic,
                 smoke: bool = True, timing: Timing = Timing()) -> None:
        self.deployment = deployment
        self.host_factory = host_factory
        self.clock = clock
        self.smoke = smoke
        self.timing = timing
        self._subscribers: list[Callable[[Event], None]] = []
        self._t0 = clock()
        self._sessions: dict[str, HostSession] = {}
        self._reaching: dict[str, float] = {}       # host -> until when the preflight tries to reach it
        self._retried: set[str] = set()             # hosts the preflight reached only after retries
        self._runs = {name: ServiceRun(cfg, LineJudge(cfg.ready.log, signatures_for(cfg.role, cfg.fail)))
                      for name, cfg in deployment.services.items()}
        self._by_unit = {(r.cfg.host, r.cfg.unit): r for r in self._runs.values()}
        self._tails: list[asyncio.Task] = []
        self._steps: dict[Step, StepStatus] = {}
        self._preflight = StepStatus.PENDING
        self._changed = asyncio.Condition()         # notified after every state change
        self._notifier: asyncio.Task | None = None
        self._flush_handle: asyncio.TimerHandle | None = None
        self._done_task: asyncio.Task | None = None
        self._last_done: Done | None = None

    # -- the public face ---------------------------------------------------
    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._subscribers.append(callback)

    async def run(self) -> Done:
        """Bring everything up; returns (and has emitted) the Done that ends the bring-up.

        Journal tails and watches keep running afterwards (a front end keeps
        showing logs and crashes) until :meth:`close`.
        """
        self._begin()
        self._follow_journals()
        await self._preflight_hosts(sample_gpus=True)
        for run in self._runs.values():
            if run.state is S.PENDING:
                run.task = asyncio.create_task(self._bring_up(run), name=f"bring-up {run.name}")
        return await self._until_done()

    def retry(self, service: str) -> bool:
        run = self._runs.get(service)
        if run is None or run.state not in (S.FAILED, S.TIMED_OUT):
            return False
        again = [run] + [self._runs[d] for d in self.deployment.dependents(service)
                         if self._runs[d].state in BAD_OUTCOMES]
        for r in again:
            if r.task and not r.task.done():
                r.task.cancel()
            r.reset()
            self._transition(r, S.PENDING, "retry")
            r.task = asyncio.create_task(self._bring_up(r), name=f"retry {r.name}")
        self._tell_outcome_again()
        return True

    def _tell_outcome_again(self) -> None:
        """After a bring-up ended, a crash or a retry changes the outcome: tell the new one when decided."""
        if self._last_done is not None and (self._done_task is None or self._done_task.done()):
            self._done_task = asyncio.create_task(self._until_done())

    async def close(self) -> None:
        """Stop watching: end tails, probes and connections. Never stops a unit."""
        tasks = [*self._tails, *(r.task for r in self._runs.values() if r.task)]
        tasks += [t for t in (self._done_task, self._notifier) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._flush_logs()
        for session in self._sessions.values():
            await session.close()

    # -- events ------------------------------------------------------------
    def elapsed(self) -> float:
        return round(self.clock() - self._t0, 3)

    def _emit(self, event: Event) -> None:
        for callback in list(self._subscribers):
            callback(event)

    def _transition(self, run: ServiceRun, new: ServiceState, reason: str = "", line: str | None = None) -> None:
        check_transition(run.name, run.state, new)
        self._flush_logs(run)
        old, run.state, run.reason = run.state, new, reason
        ttr = None
        if new is S.READY and run.started_at is not None:
            ttr = run.time_to_ready = round(self.clock() - run.started_at, 3)
        self._emit(StateChanged(run.name, old, new, reason, line, self.elapsed(), ttr))
        self._notify_changed()
        self._update_steps()

    def _probe_result(self, run: ServiceRun, check: Check) -> None:
        """Tell a check's result when it differs from the last one told."""
        if run.last_checks.get(check.name) != (check.ok, check.detail):
            run.last_checks[check.name] = (check.ok, check.detail)
            self._emit(ProbeResult(run.name, check.name, check.ok, check.detail, check.latency, self.elapsed()))

    def _host_status(self, host: str, status: str, detail: str = "") -> None:
        """A host's status as the host tells it; one the preflight keeps trying to reach says for how long.

        The host tells once that it cannot be reached: with the preflight's horizon
        added, that is the one line saying what failed and how long pdtui goes on.
        """
        if status == "connected":
            self._reaching.pop(host, None)
        left = self._reaching.get(host, -math.inf) - self.clock()
        if status == "unreachable" and left > 0:
            detail = f"{detail}; trying again for up to {format_duration(round(left))}"
        self._emit(HostStatus(host, status, detail, self.elapsed()))

    # -- hosts and journals -------------------------------------------------
    async def preflight(self) -> bool:
        """Only the preflight (hosts reachable, units present, GPUs): touches no unit. True when it passed."""
        self._begin()
        await self._preflight_hosts(sample_gpus=False)
        return self._preflight is StepStatus.DONE

    def _begin(self) -> None:
        self._t0 = self.clock()
        self._emit(PlanReady(self.deployment.name, tuple(_info(r.cfg) for r in self._runs.values()), tuple(Step)))
        self._update_steps()
        for name, cfg in self.deployment.hosts.items():
            if any(r.cfg.host == name for r in self._runs.values()):
                host = self.host_factory(cfg, on_status=self._host_status)
                self._sessions[name] = HostSession(cfg, host, command_timeout=self.timing.command_timeout,
                                                   clock=self.clock)

    def _follow_journals(self) -> None:
        for name, session in self._sessions.items():
            units = [r.cfg.unit for r in self._runs.values() if r.cfg.host == name]
            tail = session.follow(units, on_entry=partial(self._on_entry, name), on_problem=self._tail_problem)
            self._tails.append(asyncio.create_task(tail.run(), name=f"journal {name}"))

    async def _preflight_hosts(self, *, sample_gpus: bool) -> None:
        """Reach every host and look at every unit before touching anything."""
        self._preflight = StepStatus.RUNNING
        self._update_steps()
        now = self.clock()
        deadlines = {h: now + max(r.cfg.timeout for r in self._runs.values() if r.cfg.host == h) for h in self._sessions}
        self._reaching = dict(deadlines)
        # The GPU inventory is taken while the units are looked at: neither waits for the other.
        results, inventories = await asyncio.gather(
            asyncio.gather(*(self._preflight_host(h, deadlines[h]) for h in self._sessions)),
            host_inventories(self.deployment, self._hosts()))
        retried = {h: self._sessions[h].host for h, found in inventories.items() if found is None and h in self._retried}
        if retried:   # reached only after retries: its first inventory found no connection
            inventories |= await host_inventories(self.deployment, retried)
        gpus_ok = self._preflight_gpus(inventories, sample=sample_gpus)
        self._preflight = StepStatus.DONE if all(results) and gpus_ok else StepStatus.FAILED
        self._update_steps()

    def _preflight_gpus(self, inventories: dict[str, Inventory | None], *, sample: bool) -> bool:
        """The GPU inventories' findings told; errors fail their service.

        Then one long-running sampler per host keeps the GPU chips live.
        """
        ok = True
        for finding in preflight_findings(self.deployment, inventories):
            self._emit(Notice(finding.level, finding.text, finding.service, self.elapsed()))
            run = self._runs.get(finding.service or "")
            if finding.level == "error" and run is not None and run.state is S.PENDING:
                self._transition(run, S.FAILED, finding.text.removeprefix(f"{run.name}: "))
                ok = False
        for name, inventory in inventories.items():
            if sample and inventory is not None:
                argv = sampler_argv(self.deployment.hosts[name].commands["nvidia-smi"])
                sampler = GpuSampler(self._sessions[name].host, name, argv, self._emit, self.elapsed, inventory=inventory)
                self._tails.append(asyncio.create_task(sampler.run(), name=f"gpus {name}"))
        return ok

    async def _preflight_host(self, host_name: str, deadline: float) -> bool:
        ok = True
        runs = [r for r in self._runs.values() if r.cfg.host == host_name]
        looks = await asyncio.gather(*(self._reach(run, deadline) for run in runs), return_exceptions=True)
        self._reaching.pop(host_name, None)
        for run, props in zip(runs, looks, strict=False):
            if isinstance(props, HostError):
                self._transition(run, S.FAILED, str(props))
                ok = False
                continue
            if isinstance(props, BaseException):
                raise props
            if props.get("LoadState") == "not-found":
                self._transition(run, S.FAILED, f"unit {run.cfg.unit} not found on {host_name}")
                ok = False
        present = [r for r in runs if r.state is S.PENDING]
        return await self._preflight_drift(host_name, present) and ok

    async def _preflight_drift(self, host_name: str, runs: list[ServiceRun]) -> bool:
        """Each installed unit against the config (one ``systemctl cat`` for the host): a unit that runs
        something else (other GPUs, NUMA node, port, mode, router backends) fails its service before start."""
        if not runs:
            return True
        try:
            session = self._sessions[host_name]
            result = await session.command(session.commands.cat([r.cfg.unit for r in runs]))
        except HostError:
            return True     # the unit looks just passed: a host lost now is the bring-up's to tell
        installed = parse_cat(result.stdout)
        ok = True
        for run in runs:
            if run.cfg.unit not in installed:
                continue    # a systemctl without cat, or a unit of another kind: nothing to compare
            for found in service_drift(self.deployment, run.cfg, parse_installed(installed[run.cfg.unit])):
                level = "error" if found.level == "error" else "info"
                self._emit(Notice(level, found.text, run.name, self.elapsed()))
                if level == "error" and run.state is S.PENDING:
                    self._transition(run, S.FAILED, found.text.removeprefix(f"{run.name}: "))
                    ok = False
        return ok

    async def _reach(self, run: ServiceRun, deadline: float) -> dict[str, str]:
        """The unit's load state; a host that cannot be reached (sshd not up yet) is tried again until the deadline.

        The host's status tells so, once (see :meth:`_host_status`). The last try is at the deadline.
        """
        backoff = Backoff(PREFLIGHT_RETRY, PREFLIGHT_RETRY_MAX)
        while True:
            try:
                return await self._show(run)
            except HostUnreachable:
                left = deadline - self.clock()
                if left <= 0:
                    raise
                self._retried.add(run.cfg.host)
                await asyncio.sleep(min(backoff.next(), left))

    def _tail_problem(self, message: str) -> None:
        self._emit(Notice("warning", message, None, self.elapsed()))

    def _on_entry(self, host: str, entry: JournalEntry) -> None:
        run = self._by_unit.get((host, entry.unit)) if entry.unit else None
        if run is None:
            return
        if run.collecting:
            run.buffered.append(entry)
        else:
            self._consume(run, entry)

    def _consume(self, run: ServiceRun, entry: JournalEntry) -> None:
        """Judge one line (when it belongs to the current invocation) and queue it for display."""
        if entry.cursor in run.backfilled:
            run.backfilled.discard(entry.cursor)   # seen in the backfilled history already
            return
        current = run.invocation is not None and entry.invocation == run.invocation
        message = entry.message
        if entry.system:
            kind = LineKind.SYSTEM
            if current and any(m in message for m in UNIT_END_MARKERS):
                run.unit_dirty = True
                run.wake.set()
        elif current and run.state in (S.STARTING, S.WAITING, S.READY):
            kind, signature = run.judge.judge(message, entry.priority)
            if run.in_traceback and _EXCEPTION_LINE.match(message):
                run.warning, run.in_traceback = message, False
            if signature is not None:
                self._note_signature(run, signature, message)
            if kind is LineKind.READY:
                run.log_ok = True
                run.wake.set()
            elif run.state is S.WAITING and not run.fresh_line and (run.log_ok or not run.cfg.ready.log):
                run.fresh_line = True   # a service that logs while it is probed is often becoming ready
                run.wake.set()
        else:
            kind = LineKind.NORMAL
        run.pending_lines.append(LogRecord(message, kind, entry.realtime, entry.cursor))
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(self.timing.log_batch, self._flush_logs)

    def _note_signature(self, run: ServiceRun, signature: Signature, message: str) -> None:
        """What a line that matched a signature tells, by its kind (see signatures.py)."""
        if signature.severity is Severity.FATAL:
            self._note_failure(run, signature, message)
        elif signature.severity is Severity.EVIDENCE and signature.check:
            self._probe_result(run, Check(signature.check, True, signature.reason))
        elif signature.severity is Severity.TRANSFER:
            self._note_transfer_error(run, message)
        else:
            run.warning = message
            run.in_traceback = "Traceback (most recent call last)" in message

    def _note_transfer_error(self, run: ServiceRun, message: str) -> None:
        """A per-request KV transfer error: a warning naming the service, told at the 1st, 10th, 100th..."""
        run.transfer_errors += 1
        run.last_transfer = (self.clock(), message)
        count = run.transfer_errors
        if str(count).rstrip("0") == "1":
            nth = "" if count == 1 else f" (the {count}th)"
            self._emit(Notice("warning", f"{run.name}: KV transfer error{nth}: {message}", run.name, self.elapsed()))

    def _note_failure(self, run: ServiceRun, signature: Signature, message: str) -> None:
        if run.failure is None:
            run.failure = FailureCandidate(signature, message)
            run.failure_at = self.clock()
        else:
            run.failure.consider(signature, message)
        run.wake.set()

    def _flush_logs(self, only: ServiceRun | None = None) -> None:
        runs = [only] if only else list(self._runs.values())
        if only is None:
            self._flush_handle = None
        for run in runs:
            if run.pending_lines:
                lines, run.pending_lines = tuple(run.pending_lines), []
                self._emit(LogLines(run.name, lines, self.elapsed()))

    # -- one service ----------------------------------------------------------
    async def _bring_up(self, run: ServiceRun) -> None:
        deps = [self._runs[d] for d in run.cfg.after]
        await self._until(lambda: all(d.state is S.READY for d in deps) or any(d.state in BAD_OUTCOMES for d in deps))
        bad = [d for d in deps if d.state in BAD_OUTCOMES] or [d for d in deps if d.state is not S.READY]
        if bad:
            self._transition(run, S.BLOCKED, f"{bad[0].name} {bad[0].state.value.replace('_', ' ')}")
            return
        run.attempt += 1
        run.started_at = self.clock()
        deadline = run.started_at + run.cfg.timeout
        try:
            await self._start(run, deadline)
            if run.state is S.STARTING:
                self._transition(run, S.WAITING)
                await self._wait_ready(run, deadline)
            if run.state is S.READY:
                await self._watch(run)
                self._tell_outcome_again()
        except HostError as exc:
            run.collecting = False      # nothing will judge what the tail would buffer
            run.buffered.clear()
            if run.state in (S.STARTING, S.WAITING, S.READY):
                self._transition(run, S.FAILED, str(exc))

    def _hosts(self) -> dict[str, Host]:
        return {name: session.host for name, session in self._sessions.items()}

    async def _show(self, run: ServiceRun) -> dict[str, str]:
        return await self._sessions[run.cfg.host].looker.show(run.cfg.unit)

    async def _start(self, run: ServiceRun, deadline: float) -> None:
        session = self._sessions[run.cfg.host]
        commands = session.commands
        if run.cfg.role == "router":
            argv, verb = commands.enable_now(run.cfg.unit), "systemctl enable --now"
        elif run.attempt > 1:
            argv, verb = commands.restart(run.cfg.unit), "systemctl restart"
        else:
            argv, verb = None, "systemctl start"    # shared with the host's other backends
        self._transition(run, S.STARTING, f"{verb} {run.cfg.unit}")
        for old in run.cfg.replaces:
            result = await session.command(commands.disable_now(old), deadline)
            self._emit(Notice("info" if result.ok else "warning",
                              f"stopped and disabled {old}" if result.ok else f"could not stop {old}: {_last_line(result.stderr)}",
                              run.name, self.elapsed()))
        run.collecting = True
        tail_live = session.tail_live
        if argv is None:
            result = await session.starter.start(run.cfg.unit, deadline)
        else:
            result = await session.command(argv, deadline)
        if not result.ok:
            run.collecting = False
            self._transition(run, S.FAILED, f"{verb} failed: {_last_line(result.stderr) or f'exit status {result.exit_status}'}")
            return
        run.started_by_us = True
        props = await self._show(run)
        run.invocation = props.get("InvocationID") or None
        self._note_unit(run, props)
        await self._backfill(run, history=not tail_live)

    async def _backfill(self, run: ServiceRun, *, history: bool = True) -> None:
        """Judge the lines the invocation wrote before the tail saw them, then what the tail buffered."""
        lines: Iterable[JournalEntry] = ()
        if run.invocation and history:
            result, lines = await self._sessions[run.cfg.host].history.lines(run.invocation)
            if not result.ok:
                raise HostError(f"{run.cfg.host}: journalctl failed, so readiness cannot be judged: "
                                f"{_last_line(result.stderr) or f'exit status {result.exit_status}'}")
        # The tail keeps buffering while this yields now and then (a burst of history must not hold the loop).
        cursors: set[str] = set()
        for count, entry in enumerate(lines, 1):
            self._consume(run, entry)
            if entry.cursor:
                cursors.add(entry.cursor)
            await _yield_every(count)
        run.backfilled = cursors
        while run.buffered:
            buffered, run.buffered = run.buffered, []
            for count, entry in enumerate(buffered, 1):
                self._consume(run, entry)
                await _yield_every(count)
        run.collecting = False

    async def _wait_ready(self, run: ServiceRun, deadline: float) -> None:
        next_probe = self.clock()
        run.next_unit_check = self._beat(run, next_probe)   # _start has just looked at the unit
        last_probe = -math.inf
        while True:
            failure = await self._failure(run)
            if failure:
                self._transition(run, S.FAILED, *failure)
                return
            probing = run.log_ok or not run.cfg.ready.log
            now = self.clock()
            if run.fresh_line:
                run.fresh_line = False
                next_probe = min(next_probe, last_probe + self.timing.line_probe_gap)
            if not run.failure and probing and now >= next_probe:
                last_probe, next_probe = now, now + self.timing.poll
                outcome = await self._probe(run)
                if outcome is True:
                    self._transition(run, S.READY, "all checks hold")
                    return
                if isinstance(outcome, Check):
                    self._transition(run, S.FAILED, f"{outcome.name}: {outcome.detail}")
                    return
            now = self.clock()
            if now >= deadline:
                self._transition(run, S.TIMED_OUT, self._waiting_for(run))
                return
            await self._sleep(run, min(deadline, self._next_look(run), next_probe if probing else deadline) - now)

    async def _failure(self, run: ServiceRun) -> tuple[str, str | None] | None:
        """A settled failure line or a dead unit, as (reason, line); looks at the unit when that is due."""
        now = self.clock()
        if run.failure and run.failure_at is not None and now - run.failure_at >= self.timing.settle:
            return run.failure.signature.reason, run.failure.line
        if run.unit_dirty or now >= run.next_unit_check:
            run.unit_dirty = False
            run.next_unit_check = self._beat(run, now)
            await self._check_unit(run)
        if run.unit_problem and not run.failure:
            return run.unit_problem, run.warning
        return None

    def _beat(self, run: ServiceRun, now: float) -> float:
        """The next moment the unit is looked at: every service on the same beat, so a host's looks share a command.

        A host whose looks are slow (a loaded machine) is looked at on a later
        beat: after a look that took d seconds, none before LOOK_REST * d. Its
        units' ends still wake their services at once, through systemd's lines.
        """
        poll = self.timing.unit_poll
        rest = LOOK_REST * self._sessions[run.cfg.host].looker.last_took
        return self._t0 + (math.floor((now + rest - self._t0) / poll) + 1) * poll

    def _next_look(self, run: ServiceRun) -> float:
        """When :meth:`_failure` has something new to look at, at the latest."""
        if run.failure and run.failure_at is not None:
            return min(run.next_unit_check, run.failure_at + self.timing.settle)
        return run.next_unit_check

    async def _sleep(self, run: ServiceRun, seconds: float) -> None:
        run.wake.clear()
        try:
            await asyncio.wait_for(run.wake.wait(), max(0.0, seconds))
        except TimeoutError:
            pass

    async def _check_unit(self, run: ServiceRun) -> None:
        """Look at the unit; a host that cannot be reached right now tells nothing about it (look again later)."""
        try:
            props = await self._show(run)
        except (HostDisconnected, HostUnreachable):
            return
        self._note_unit(run, props)

    def _note_unit(self, run: ServiceRun, props: dict[str, str]) -> None:
        """What a look at the unit tells: its state, and a problem when it died or restarted."""
        run.active_state = props.get("ActiveState", "")
        invocation = props.get("InvocationID") or None
        if run.active_state == "failed":
            run.unit_problem = f"unit {run.cfg.unit} failed (exit status {props.get('ExecMainStatus', '?')})"
        elif run.active_state in ("inactive", "deactivating"):
            run.unit_problem = f"unit {run.cfg.unit} stopped ({run.active_state})"
        elif run.invocation and invocation and invocation != run.invocation:
            run.unit_problem = f"unit {run.cfg.unit} restarted (NRestarts={props.get('NRestarts', '?')})"

    async def _probe(self, run: ServiceRun) -> bool | Check | None:
        """Run the active checks: True when all hold, a Check when one failed for good, else None."""
        host = self._sessions[run.cfg.host].host
        if run.cfg.role == "router":
            return await self._probe_router(run, host)
        checks = []
        if run.cfg.ready.tcp and run.cfg.port:
            checks.append(await tcp_check(host, run.cfg.port))
        if run.cfg.ready.http and run.cfg.port and all(c.ok for c in checks):
            checks.append(await http_check(self._sessions[run.cfg.host].prober, run.cfg.port, run.cfg.ready.http))
        if run.cfg.role == "prefill" and run.cfg.port and all(c.ok for c in checks):
            checks.append(await self._bootstrap_check(run, host))
        for check in checks:
            self._probe_result(run, check)
        return all(c.ok for c in checks) or None

    async def _bootstrap_check(self, run: ServiceRun, host: Host) -> Check:
        """A PD prefill's bootstrap server: its port accepting (a Server error: line fails it as it comes)."""
        if run.bootstrap is None:
            assert run.cfg.port is not None
            run.bootstrap = run.cfg.bootstrap_port or await bootstrap_port(self._sessions[run.cfg.host].prober, run.cfg.port)
        check = await tcp_check(host, run.bootstrap)
        return Check(BOOTSTRAP, check.ok, f"bootstrap server {check.detail}", check.latency)

    async def _probe_router(self, run: ServiceRun, host: Host) -> bool | Check | None:
        probe = run.router_probe
        if probe is None:
            assert run.cfg.port is not None      # the config requires a router's port
            probe = run.router_probe = RouterProbe(self._sessions[run.cfg.host].prober, run.cfg.port,
                                                   self._backends(run), smoke=self.smoke,
                                                   transfer_error=partial(self._transfer_error_since, run),
                                                   clock=self.clock)
        last = None
        async for check in probe.steps(host):
            self._probe_result(run, check)
            last = check
        if last is not None and last.ok:
            return True
        return last if last is not None and last.final else None

    async def _transfer_error_since(self, router: ServiceRun, since: float, wait: bool) -> str | None:
        """A KV transfer error a backend of ``router`` logged since ``since``, quoted with its service.

        ``wait``: the request failed, and its backend's line may still be on its
        way through the journal: give it the settle time to arrive.
        """
        deadline = self.clock() + (self.timing.settle if wait else 0.0)
        while True:
            for name in router.cfg.after:
                last = self._runs[name].last_transfer
                if last is not None and last[0] >= since:
                    return f"{name}: {last[1]}"
            if self.clock() >= deadline:
                return None
            await asyncio.sleep(0.02)

    def _backends(self, router: ServiceRun) -> list[Backend]:
        backends = []
        for name in router.cfg.after:
            cfg = self._runs[name].cfg
            if cfg.role not in ("prefill", "decode") or not cfg.port:
                continue
            host = self.deployment.hosts[cfg.host]
            names = {n for n in (host.address, cfg.host) if n}
            if cfg.host == router.cfg.host or host.local:
                names |= LOOPBACK
            backends.append(Backend(name, cfg.role, cfg.port, frozenset(names)))
        return backends

    def _waiting_for(self, run: ServiceRun) -> str:
        pending = [name for name, (ok, _) in run.last_checks.items() if not ok]
        if run.cfg.ready.log and not run.log_ok:
            pending.insert(0, f"log line /{run.cfg.ready.log}/")
        details = [f"{n} ({run.last_checks[n][1]})" if n in run.last_checks else n for n in pending]
        return f"not ready after {run.cfg.timeout:g}s: waiting for " + (", ".join(details) or "readiness")

    async def _watch(self, run: ServiceRun) -> None:
        """After READY: a fatal line, a dead unit or health that keeps failing fails the service.

        One request's error (a traceback, a transfer error) never does: the
        server goes on serving the next one.
        """
        run.next_unit_check = self._beat(run, self.clock())
        next_health = self.clock() + self.timing.watch_poll
        while run.state is S.READY:
            failure = await self._failure(run)
            if failure is None and run.cfg.ready.http and self.clock() >= next_health:
                next_health = self.clock() + self.timing.watch_poll
                failure = await self._health_lost(run)
            if failure:
                reason, line = failure
                self._transition(run, S.FAILED, f"after ready: {reason}", line)
                break
            wake = min(self._next_look(run), next_health if run.cfg.ready.http else math.inf)
            await self._sleep(run, wake - self.clock())
        self._tell_degraded(run)

    async def _health_lost(self, run: ServiceRun) -> tuple[str, str | None] | None:
        """One health check of a ready service; a failure once it has failed long enough in a row."""
        assert run.cfg.port is not None and run.cfg.ready.http is not None
        check = await http_check(self._sessions[run.cfg.host].prober, run.cfg.port, run.cfg.ready.http)
        self._probe_result(run, check)
        now = self.clock()
        if check.ok:
            run.unhealthy_since, run.unhealthy_count = None, 0
            return None
        if run.unhealthy_since is None:
            run.unhealthy_since = now
        run.unhealthy_count += 1
        failing = now - run.unhealthy_since
        if run.unhealthy_count >= HEALTH_FAILS_IN_A_ROW and failing >= run.cfg.unhealthy_after:
            return (f"{check.name} failing for {failing:.0f}s ({run.unhealthy_count} checks in a row): {check.detail}",
                    run.warning)
        return None

    def _tell_degraded(self, run: ServiceRun) -> None:
        """A service failed after it was ready: what was ready on top of it (the router) now runs without it."""
        for name in self.deployment.dependents(run.name):
            if self._runs[name].state is S.READY:
                self._emit(Notice("warning", f"{name} degraded: {run.name} failed after it was ready ({run.reason})",
                                  name, self.elapsed()))

    # -- the whole ---------------------------------------------------------------
    async def _until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition`` holds; it is looked at after every state change."""
        async with self._changed:
            await self._changed.wait_for(condition)

    def _notify_changed(self) -> None:
        """Wake the waiters of :meth:`_until`: ``notify_all`` needs the condition's lock, taken in a task.

        Changes that come before it runs share it: each waiter looks at its condition anew.
        """
        if self._notifier is None or self._notifier.done():
            self._notifier = asyncio.create_task(self._notify_all())

    async def _notify_all(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _decided(self) -> bool:
        """Every service settled, or one failed and all it blocks is marked blocked already."""
        runs = list(self._runs.values())
        if any(r.state is S.PENDING and any(self._runs[d].state in BAD_OUTCOMES for d in r.cfg.after) for r in runs):
            return False
        return all(r.state in FINAL_STATES for r in runs) or any(r.state in (S.FAILED, S.TIMED_OUT) for r in runs)

    async def _until_done(self) -> Done:
        """Wait until the outcome is decided, then tell it."""
        await self._until(self._decided)
        self._flush_logs()
        done = self._make_done()
        self._last_done = done
        self._emit(done)
        return done

    def _make_done(self) -> Done:
        runs = list(self._runs.values())
        ok = all(r.state is S.READY for r in runs)
        ttr = {r.name: r.time_to_ready for r in runs if r.state is S.READY and r.time_to_ready is not None}
        failures = {r.name: r.reason or r.state.value for r in runs if r.state in BAD_OUTCOMES}
        return Done(ok, 0 if ok else 1, ttr, failures, self.left_running(), self.elapsed())

    def left_running(self) -> tuple[str, ...]:
        """Units this bring-up started that were running when last looked at."""
        return tuple(r.cfg.unit for r in self._runs.values()
                     if r.started_by_us and r.active_state in ("active", "activating", "reloading"))

    def _update_steps(self) -> None:
        for step, status in step_statuses(self._preflight, list(self._runs.values())).items():
            if self._steps.get(step) != status:
                self._steps[step] = status
                self._emit(StepChanged(step, status, "", self.elapsed()))


def _info(cfg: ServiceConfig) -> ServiceInfo:
    return ServiceInfo(cfg.name, cfg.role, cfg.unit, cfg.host, tuple(cfg.gpus), cfg.numa, cfg.port,
                       tuple(cfg.after), cfg.timeout)


async def _yield_every(count: int, every: int = 200) -> None:
    """Let the event loop run every ``every`` items of a long synchronous batch."""
    if count % every == 0:
        await asyncio.sleep(0)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
