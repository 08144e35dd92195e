"""One service's run as a systemd unit: started (or attached to), looked at and stopped through systemctl.

A :class:`UnitRun` is a :class:`ServiceRun` whose steps that touch the unit go
through its host's session: one batched ``systemctl show`` for the host's looks,
one ``systemctl start`` for the units starting together, the invocation's
history read from the journal up to where the host's tail took over. What it
judges, and how it waits and watches, is the ServiceRun's.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import Iterable, Mapping

from pdtui.config import Deployment, ServiceConfig
from pdtui.engine.events import Notice, ServiceInfo, UnitStatus
from pdtui.engine.intent import Action
from pdtui.engine.log_entry import LogEntry
from pdtui.engine.readiness import LineJudge
from pdtui.engine.service_run import ServiceRun, yield_every
from pdtui.engine.states import JUDGED_STATES, ServiceState
from pdtui.gpus.inventory import gpu_holders
from pdtui.hosts.base import HostError, HostTimedOut
from pdtui.targets.systemd.commands import Commands, memory_lock, parse_timestamp, why_it_failed
from pdtui.targets.systemd.host_session import HostSession
from pdtui.targets.systemd.journal_json import parse_entry
from pdtui.targets.systemd.settings import UnitService, hosts_of, unit_service
from pdtui.targets.systemd.shared_commands import attached_history
from pdtui.targets.systemd.unit_results import by_executor, ended, over, restarting, telling
from pdtui.vocabulary.checks import LOOPBACK, Check

S = ServiceState
RUNNING_STATES = ("active", "activating", "reloading")
STOPPED_STATES = ("inactive", "failed")
EXECUTOR_LINES_AGAIN = 0.2     # seconds between reads of an executor's lines not yet in the journal


class UnitRun(ServiceRun):
    """One service of the deployment that runs as a systemd unit on its host."""

    ends_in_its_lines = True      # systemd logs "Main process exited" and the like in the unit's journal
    cfg: UnitService

    def __init__(self, cfg: ServiceConfig, judge: LineJudge) -> None:
        super().__init__(unit_service(cfg), judge)
        self.active_state = ""
        self.entered: float | None = None            # when the unit became active, seconds since the epoch
        self._unit_told: UnitStatus | None = None
        self._looked: tuple[float, Mapping[str, str]] | None = None   # when last looked at, and what it said

    @property
    def unit(self) -> str:
        """Its unit: a service run by this class has one (a Slurm job's run is a JobRun)."""
        assert self.cfg.unit is not None, f"{self.name}: a job has no unit"
        return self.cfg.unit

    @property
    def running(self) -> bool:
        """Whether the unit was running when last looked at."""
        return self.active_state in RUNNING_STATES

    @property
    def units(self) -> HostSession:
        """The session of its unit's host: systemctl, the journal (a job's run has a cluster's session)."""
        assert isinstance(self.session, HostSession), f"{self.name}: not a unit's run"
        return self.session

    def names_for(self, router: ServiceConfig) -> frozenset[str]:
        """The host names under which ``router`` knows this backend (its workers' URLs name one of them)."""
        host = hosts_of(self.w.deployment)[self.cfg.host]
        names = {n for n in (host.address, self.cfg.host) if n}
        if self.cfg.host == router.host or host.local:
            names |= LOOPBACK
        return frozenset(names)

    def url_for(self, router: ServiceConfig) -> str | None:
        return self.w.deployment.backend_url(router, self.cfg)

    def info(self, deployment: Deployment) -> ServiceInfo:
        """The service as the faces draw it, with the exact commands a restart or stop from the UI runs."""
        cfg, commands = self.cfg, Commands.for_host(hosts_of(deployment)[self.cfg.host])
        return ServiceInfo(cfg.name, cfg.role, self.unit, cfg.host, tuple(cfg.gpus), cfg.numa, cfg.port,
                           tuple(cfg.after), cfg.timeout, shlex.join(commands.restart(self.unit)),
                           shlex.join(commands.stop(self.unit)), engine=cfg.engine, rank=cfg.rank,
                           server=cfg.server if cfg.follower else "")

    async def bring_up(self, action: Action = Action.START) -> bool:
        """Start a fresh attempt and see it through; True if it was ready (and its watch has ended).

        ``START`` attaches to a unit that is running already, ``RESTART``
        starts it afresh, ``ATTACH`` only judges the invocation that runs.
        """
        self.attempt = self.fresh_attempt()
        try:
            self.attempt.collecting = True          # lines of the invocation found are held until its history is read
            props = await self._fresh_look()
            if props.get("LoadState") == "not-found":
                self.lines.release_held()
                self.transition(S.FAILED, f"unit {self.cfg.unit} not found on {self.cfg.host}")
                return False
            if action is not Action.RESTART and self._running_invocation(props):
                await self._attach(props, "already running: attached" if action is Action.START else "attached")
            elif action is Action.ATTACH:
                self.lines.release_held()
                problem = self._unit_problem(props)
                if self.active_state == "failed" or restarting(props):
                    self.transition(S.FAILED, problem or f"unit {self.cfg.unit} failed")
                else:
                    self.transition(S.STOPPED, f"unit {self.cfg.unit} {self.active_state or 'inactive'}")
                return False
            else:
                await self._start(action)
            assert self.attempt.started_at is not None
            deadline = self.attempt.started_at + self.cfg.timeout
            if self.state is S.STARTING:
                self.transition(S.WAITING)
            if self.state is S.WAITING:
                await self.ready_wait.wait(deadline)
            if self.state is S.READY:
                await self.serving_watch.watch()
                return True
        except HostError as exc:
            self.lines.release_held()
            if self.state in (S.PENDING, *JUDGED_STATES):
                self.transition(S.FAILED, str(exc))
        except asyncio.CancelledError:
            enabling = self.attempt.enabling
            if enabling is not None and not enabling.done():   # a task left to the loop's close may hang there
                enabling.cancel()
                await asyncio.gather(enabling, return_exceptions=True)
            raise
        return False

    async def _fresh_look(self) -> Mapping[str, str]:
        """The unit's properties: the preflight's look, or the latest of :meth:`keep_looking`, while it is as
        recent as looks on its host's beat are (a fleet's thousand backends start right after the preflight; a
        router right after its backends are ready, without a look of its own in between), else a new one."""
        if self._looked is not None and self.looks.is_fresh(self._looked[0]):
            return self._looked[1]
        props = await self.show()
        self.note_unit(props)
        return props

    async def keep_looking(self) -> None:
        """While it waits for what it comes after, look at the unit on its host's beat (the same command as the
        host's other looks): once they are ready it starts at once, no look of its own between their last ready
        line and its start."""
        while True:
            now = self.w.clock()
            await asyncio.sleep(self.looks.beat(now) - now)
            try:
                self.note_unit(await self.show())
            except HostError:
                pass      # told by the look its start makes, if it lasts

    def _running_invocation(self, props: Mapping[str, str]) -> bool:
        return self.running and bool(props.get("InvocationID")) and not restarting(props)

    async def _attach(self, props: Mapping[str, str], reason: str) -> None:
        """The unit runs already: judge its current invocation, from its first line, as if pdtui had started it.

        Its timeout counts from the unit's own start (when systemd's timestamp
        can be read): a unit up for an hour and still not ready times out now.
        """
        attempt = self.attempt
        attempt.attached = True
        attempt.invocation = props.get("InvocationID") or None
        entered = self.entered
        if entered is not None and attempt.started_at is not None:
            attempt.started_at -= max(0.0, time.time() - entered)
        since = props.get("ActiveEnterTimestamp", "")
        self.transition(S.WAITING, f"{reason} (active since {since})" if since else reason)
        assert attempt.invocation is not None
        session = self.units
        start_up = (entered - 1.0, entered + self.cfg.timeout) if entered is not None else None
        try:
            lines = await attached_history(session.read, session.commands, attempt.invocation,
                                           self.lines.judge.telling_pattern(), start_up)
        except HostError as exc:
            raise HostError(f"{self.cfg.host}: {exc}") from None
        await self._backfill(lines)

    async def show(self) -> dict[str, str]:
        """The unit's properties (one batched ``systemctl show`` for the host's looks)."""
        return await self.units.looker.show(self.unit)

    async def _start(self, action: Action) -> None:
        """Start the unit, or restart it; then read what its new invocation logged. A router is enabled too,
        once started and looked at, beside its start-up (see :meth:`_enable`)."""
        session = self.units
        commands = session.commands
        restart = action is Action.RESTART and (self.running or not self.cfg.is_router)
        if restart:
            argv, verb = commands.restart(self.unit), "systemctl restart"
        else:
            argv, verb = None, "systemctl start"    # shared with the host's other units started at that moment
        assert self.attempt.started_at is not None
        deadline = self.attempt.started_at + self.cfg.timeout
        self.transition(S.STARTING, f"{verb} {self.cfg.unit}")
        for old in self.cfg.replaces:
            result = await session.command(commands.disable_now(old), deadline, waits=True)
            text = f"stopped and disabled {old}" if result.ok else f"could not stop {old}: {result.last_words}"
            self.w.emit(Notice("info" if result.ok else "warning", text, self.name, self.w.elapsed()))
        if self.active_state == "failed":
            await self._reset_failed(deadline)
        self.lines.release_held()     # the lines so far are an earlier invocation's
        self.attempt.collecting = True
        tail_live = session.tail_live
        looked = None
        try:
            if argv is None:
                started = await session.starter.start(self.unit, deadline)     # looked at in the same command
                result, looked = started.result, started.props
            else:
                result = await session.command(argv, deadline, waits=True)
        except HostTimedOut:
            # A start waits for its job (ExecStartPre=, a Type=notify unit's READY=1), given the whole deadline:
            # one still under way at the deadline is the service's timeout, not a failure of the host.
            self.lines.release_held()
            self.transition(S.TIMED_OUT, f"not ready after {self.cfg.timeout:g}s: {verb} {self.cfg.unit} had not "
                                         f"returned (its start job was still running)")
            return
        if not result.ok:
            self.lines.release_held()
            self.transition(S.FAILED, f"{verb} failed: {why_it_failed(result)}")
            return
        self.started_by_us = True
        self.attempt.unit_problem = None     # the look before the start saw the unit stopped, as it was
        props = looked or await self.show()
        if self.cfg.is_router and not restart:    # after the look: a manager reloading answers no look meanwhile
            self.attempt.enabling = asyncio.create_task(self._enable(deadline))
        self.attempt.invocation = props.get("InvocationID") or None
        self.note_unit(props)
        await self._backfill(read=not tail_live)

    async def _reset_failed(self, deadline: float) -> None:
        """A unit left failed may be at its start limit, which refuses any start, pdtui's too, until it is cleared:
        cleared first (``systemctl reset-failed``), saying how it had ended."""
        session = self.units
        how = ended(self._looked[1]) if self._looked is not None else "failed"
        result = await session.command(session.commands.reset_failed(self.unit), deadline)
        if result.ok:
            notice = Notice("info", f"{self.cfg.unit} was left failed ({how}): cleared before its start "
                                    "(systemctl reset-failed, which lifts its start limit too)", self.name,
                            self.w.elapsed())
        else:
            notice = Notice("warning", f"could not clear the failed {self.cfg.unit} (systemctl reset-failed): "
                                       f"{result.last_words}", self.name, self.w.elapsed())
        self.w.emit(notice)

    async def _enable(self, deadline: float) -> None:
        """``systemctl enable``: the router starts again at boot. Not on the way to its start: enabling reloads
        the manager's configuration (0.2 s here, more on a host with many units), so it runs once the start
        returned and the unit was looked at (systemd answers no ``show`` while it reloads), beside the router's
        own start-up; a failure is told on its own and leaves the router running."""
        session = self.units
        try:
            result = await session.command(session.commands.enable(self.unit), deadline)
            problem = None if result.ok else result.last_words
        except HostError as exc:
            problem = str(exc)
        if problem is not None:
            self.w.emit(Notice("warning", f"could not enable {self.cfg.unit} (it runs, but will not start at boot): "
                                          f"{problem}", self.name, self.w.elapsed()))

    async def stop(self, *, disable: bool = False, why: str = "") -> None:
        """Stop the unit (``systemctl stop``, or ``disable --now``), wait until it is inactive and its GPUs'
        memory is released; STOPPED, or FAILED naming what still runs or what still holds GPU memory."""
        session, clock = self.units, self.w.clock
        deadline = clock() + self.w.timing.stop_timeout
        try:
            props = await self.show()
            self.note_unit(props)
            if props.get("LoadState") == "not-found":
                self._settle(S.FAILED, f"unit {self.cfg.unit} not found on {self.cfg.host}")
                return
            if not self.running and not disable:
                self._settle(S.STOPPED, f"unit {self.cfg.unit} was not running ({self.active_state or 'inactive'})"
                                        + (f": {why}" if why else ""))
                return
            argv = session.commands.disable_now(self.unit) if disable else session.commands.stop(self.unit)
            verb = "systemctl disable --now" if disable else "systemctl stop"
            self.transition(S.STOPPING, f"{verb} {self.cfg.unit}")
            result = await session.command(argv, deadline, waits=True)
            if not result.ok:
                self.transition(S.FAILED, f"{verb} failed: {why_it_failed(result)}")
                return
            problem = await self._until_inactive(deadline) or await self._until_gpus_released(deadline)
            if problem:
                self.transition(S.FAILED, problem)
                return
            how = "stopped and disabled" if disable else "stopped"
            if self.active_state == "failed":    # it did not end cleanly (killed at systemd's stop timeout, say)
                how += f" (the unit ended failed: {self.attempt.unit_problem or 'see its log'})"
            self.transition(S.STOPPED, f"{how}: {why}" if why else how)
        except HostError as exc:
            self._settle(S.FAILED, str(exc))

    async def _until_inactive(self, deadline: float) -> str | None:
        """None once the unit is inactive (or failed: it ended); else what it still is at the deadline. A look its
        host did not answer is looked again (:meth:`_check_unit`): the stop's deadline bounds them."""
        while True:
            await self._check_unit()
            if self.active_state in STOPPED_STATES:
                return None
            if self.w.clock() >= deadline:
                return f"unit {self.cfg.unit} still {self.active_state} after {self.w.timing.stop_timeout:g}s"
            await asyncio.sleep(self.w.timing.poll)

    async def _until_gpus_released(self, deadline: float) -> str | None:
        """None once no process holds memory on the service's GPUs (or nvidia-smi cannot tell); else who does."""
        if not self.cfg.gpus:
            return None
        nvidia_smi = hosts_of(self.w.deployment)[self.cfg.host].commands["nvidia-smi"]
        while True:
            held = await gpu_holders(self.units.host, nvidia_smi, self.cfg.gpus)
            if not held:
                if held is not None:
                    self.tell.probe_result(Check("gpus", True, "GPU memory released"))
                return None
            self.tell.probe_result(Check("gpus", False, f"waiting for GPU memory: {'; '.join(held)}"))
            if self.w.clock() >= deadline:
                return f"GPU memory still held after {self.w.timing.stop_timeout:g}s: {'; '.join(held)}"
            await asyncio.sleep(self.w.timing.poll)

    async def _backfill(self, history: Iterable[LogEntry] | None = None, *, read: bool = True) -> None:
        """Judge the lines the invocation wrote before the tail saw them, then what the tail buffered.

        ``history``: those lines, read already; else they are read now (``read``:
        unless the tail surely saw them all), up to where the tail starts having
        every entry (InvocationHistory): a burst is held by the tail's buffer or
        by the read, never whole by both. The few entries both have are the
        tail's copies dropped here by cursor.
        """
        attempt = self.attempt
        lines: Iterable[LogEntry] = history if history is not None else ()
        if history is None and attempt.invocation and read:
            result, lines = await self.units.history.lines(attempt.invocation)
            if not result.ok:
                raise HostError(f"{self.cfg.host}: journalctl failed, so readiness cannot be judged: "
                                f"{result.last_words}")
        # The tail keeps buffering while this yields now and then (a burst of history must not hold the loop).
        cursors: set[str] = set()
        for count, entry in enumerate(lines, 1):
            self.lines.consume(entry)
            if entry.cursor:
                cursors.add(entry.cursor)
            await yield_every(count)
        attempt.backfilled = cursors
        while attempt.buffered:
            buffered, attempt.buffered = attempt.buffered, []
            for count, entry in enumerate(buffered, 1):
                self.lines.consume(entry)
                await yield_every(count)
        attempt.collecting = False

    async def _check_unit(self) -> None:
        """Look at the unit; a look its host did not answer tells nothing about it (see
        :meth:`~pdtui.engine.run_looks.RunLooks.answered`)."""
        props = await self.looks.answered(self.show())
        if props is not None:
            self.note_unit(props)

    def note_unit(self, props: dict[str, str]) -> None:
        """What a look at the unit tells: its state, and a problem when it died or restarted."""
        attempt = self.attempt
        self._looked = (self.w.clock(), props)
        self.active_state = props.get("ActiveState", "")
        pid = props.get("MainPID", "")
        self.main_pid = int(pid) if pid.isdigit() else 0
        self.memory_lock = memory_lock(props) or self.memory_lock
        self._tell_unit(props)
        attempt.unit_problem = self._unit_problem(props) or attempt.unit_problem

    async def last_words(self) -> str | None:
        """The unit is over: let its last lines in, then systemd's own line on its end where it wrote one
        (``Failed to locate executable …``): said before the exception of a traceback just before it.

        journald hands lines to the tail up to 0.4 s after they were written
        (more on a loaded host), so a look can see a unit dead before its
        traceback has come. systemd's own line on its end comes after them:
        wait for it, at most ``timing.last_lines``. A unit its executor ended
        before ExecStart ran (203/EXEC) is told by the executor's own line,
        which the tail may never get: see :meth:`_executor_said`.
        """
        attempt = self.attempt
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.w.timing.last_lines):
                await attempt.end_logged.wait()
                while self._looked is not None and by_executor(self._looked[1]) and \
                        telling(attempt.system_lines, self.unit) is None:
                    attempt.system_lines += await self._executor_said()
                    await asyncio.sleep(EXECUTOR_LINES_AGAIN)
        return telling(self.attempt.system_lines, self.unit)

    async def _executor_said(self) -> list[str]:
        """systemd's lines on the current invocation, read from the journal by the invocation they name.

        The executor writes from the process forked for ExecStart, which is gone
        by the time journald reads where it came from: journald then cannot tell
        its unit (no ``_SYSTEMD_UNIT``; 2 of 12 starts on a loaded host here),
        and a tail that follows the unit never gets the line. The entry names
        the unit and its invocation itself (``UNIT=``, ``INVOCATION_ID=``).
        """
        invocation = self.attempt.invocation
        if invocation is None:
            return []
        session = self.units
        try:
            result = await session.read(session.commands.invocation_history([invocation]))
        except HostError:
            return []        # its state alone says why, as without the line
        told = set(self.attempt.system_lines)
        return [entry.message for entry in map(parse_entry, result.stdout.splitlines())
                if entry is not None and entry.system and entry.message not in told]

    def _unit_problem(self, props: Mapping[str, str]) -> str | None:
        """Why the unit's current invocation is over, if it is (see :func:`over`)."""
        return over(self.cfg.unit, props, self.attempt.invocation)

    def _tell_unit(self, props: Mapping[str, str]) -> None:
        """Tell the unit's state when it changed (its uptime counts from systemd's timestamp).

        Every look comes here, a fleet's every beat: the timestamp is read only when something changed.
        """
        since, sub, invocation = props.get("ActiveEnterTimestamp", ""), props.get("SubState", ""), \
            props.get("InvocationID", "")
        told = self._unit_told
        if told is not None and (told.active, told.sub, told.invocation, told.since) == (
                self.active_state, sub, invocation, since):
            return
        self.entered = parse_timestamp(since) if since else None
        uptime = None if self.entered is None else max(0.0, time.time() - self.entered)
        self._unit_told = UnitStatus(self.name, self.active_state, sub, invocation, since, uptime, self.main_pid,
                                     self.w.elapsed())
        self.w.emit(self._unit_told)
