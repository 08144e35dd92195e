"""What changes running services once a bring-up has them: retry, restart, stop (one, from a face or the command
line), the whole deployment taken down, and their pairs proven again.

:class:`Lifecycle` decides which runs a command touches and in what order (a
backend under serving routers is drained: taken out of them, restarted, proven
and put back while they serve on, engine/drain.py; without a drain a restart
sends what comes after the restarted services back to waiting; a prefill
restarted under a decode that keeps running is warned about; down stops the
router first); the orchestrator gives each run its task and tells the outcome
again (the :class:`Launcher` it implements).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from pdtui.config import BACKEND_ROLES, Deployment
from pdtui.config.fields import format_duration
from pdtui.engine.drain import Drain
from pdtui.engine.events import Event, Notice
from pdtui.engine.intent import Action, Intent, RestartHow
from pdtui.engine.router_workers import RouterApiError
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.states import SERVING_STATES, ServiceState

S = ServiceState
BAD_OUTCOMES = frozenset({S.FAILED, S.TIMED_OUT, S.BLOCKED})
BUSY_NOW = frozenset({S.STARTING, S.STOPPING})   # a restart or stop from the UI waits until these are over


class Launcher(Protocol):
    """What a lifecycle command needs of the bring-up around it (the orchestrator)."""

    def launch(self, run: ServiceRun, action: Action, *, wait: bool = True, reason: str = "") -> None:
        """Give ``run`` a new task doing ``action``, once what it comes after is ready (when ``wait``)."""

    def tell_outcome_again(self) -> None: ...

    def emit(self, event: Event) -> None: ...

    def elapsed(self) -> float: ...

    def clock(self) -> float: ...

    def changed(self) -> None:
        """Whoever waits on a condition looks again (a drain began or ended)."""

    async def until(self, condition: Callable[[], bool]) -> None: ...


class Lifecycle:
    def __init__(self, deployment: Deployment, runs: Mapping[str, ServiceRun], intent: Intent,
                 launcher: Launcher) -> None:
        self.deployment = deployment
        self.runs = runs
        self.intent = intent
        self.launcher = launcher
        self.asked: set[asyncio.Task] = set()       # what a face asked for (pairs proven again) while it runs
        self.draining: set[str] = set()             # backends out of their routers until proven and put back
        self.rolling = False                        # a rolling restart under way (one at a time)
        self._told_undrained: set[str] = set()      # backends told a router in front cannot drain them

    def retry(self, service: str) -> bool:
        """Start a failed or timed-out service again (a fresh attempt; a server over several nodes, every rank),
        and what it blocked."""
        run = self._server(service)
        if run is None or all(rank.state not in (S.FAILED, S.TIMED_OUT) for rank in self.ranks(run)):
            return False
        self._launch(run, Action.RESTART, reason="retry")       # its next bring-up begins a fresh attempt
        for name in self.deployment.dependents(run.name):
            if self.runs[name].state in BAD_OUTCOMES:
                self.launcher.launch(self.runs[name], Action.START, reason="retry")
        self.launcher.tell_outcome_again()
        return True

    def restart_one(self, service: str, how: RestartHow = RestartHow.DRAIN) -> bool:
        """Restart one service now: a backend under serving routers drained (or its role rolled, this one first),
        or at once, what comes after it going back to waiting and proven again."""
        run = self._server(service)
        if run is None or any(busy(r) for r in self.ranks(run)) or run.name in self.draining or (
                how is RestartHow.ROLLING and self.rolling):
            return False
        if how is RestartHow.NOW or (how is RestartHow.DRAIN and not self.intent.drain) or not self._serving_routers(run):
            self._restart_now([run], with_dependents=False)
        elif how is RestartHow.ROLLING:
            role = [r for r in self.runs.values() if r.cfg.role == run.cfg.role and r is not run
                    and not r.cfg.follower and r.state in SERVING_STATES and not busy(r)]
            self._start_roll([run, *role])
        else:
            self.draining.add(run.name)
            self._ask(self._drained_restart(run), f"drain and restart {run.name}")
        self.launcher.tell_outcome_again()
        return True

    def stop_one(self, service: str) -> bool:
        """Stop one service's unit now: drained out of its serving routers first, as ``down SERVICE`` does (what
        comes after it is told it runs without it when it is not)."""
        run = self._server(service)
        if run is None or any(busy(r) for r in self.ranks(run)) or all(r.state is S.STOPPED for r in self.ranks(run)) \
                or run.name in self.draining:
            return False
        self.take_out_and_stop([run])
        self.launcher.tell_outcome_again()
        return True

    def prove_pairs(self, routers: list[ServiceRun]) -> bool:
        """Prove every prefill × decode pair behind each serving router again, now (False: no router serves)."""
        serving = [run for run in routers if run.state in SERVING_STATES]
        for run in serving:
            self._ask(run.proving.prove_pairs(), f"prove the pairs of {run.name}")
        return bool(serving)

    def restart(self, runs: list[ServiceRun], *, with_dependents: bool) -> None:
        """Restart ``runs``; what comes after them waits for them and is proven again (restarted too, when asked).

        A backend under serving routers is drained instead (unless ``--no-drain`` or ``--with-dependents``): taken
        out of them, restarted, proven and put back, the routers serving throughout."""
        runs = list({self.runs[run.cfg.server]: None for run in runs})     # a server over several nodes: as one
        if self.intent.rolling:
            self._start_roll(runs)
            return
        self._warn_lone_prefill(runs, with_dependents)
        drained = [] if with_dependents or not self.intent.drain else [r for r in runs if self._serving_routers(r)]
        for run in drained:
            self.draining.add(run.name)
            self._ask(self._drained_restart(run), f"drain and restart {run.name}")
        self._restart_now([r for r in runs if r not in drained], with_dependents=with_dependents)

    def _start_roll(self, runs: list[ServiceRun]) -> None:
        """A rolling restart of ``runs``, said before it begins when a prefill is among them."""
        self._tell_prefill_roll(runs, self.intent.with_dependents)
        self.rolling = True
        self.draining.update(run.name for run in runs)
        self._ask(self._roll(runs), f"rolling restart of {', '.join(r.name for r in runs)}")

    def _restart_now(self, runs: list[ServiceRun], *, with_dependents: bool) -> None:
        """Restart ``runs`` at once; what comes after them goes back to waiting (or restarts, when asked)."""
        names = ", ".join(r.name for r in runs)
        for run in runs:
            self._launch(run, Action.RESTART, reason="restart")
        for name in self._restart_dependents(runs):
            if self.runs[name] in runs:
                continue
            action = Action.RESTART if with_dependents else Action.ATTACH
            self.launcher.launch(self.runs[name], action, reason=f"waiting for {names}")

    def take_down(self, runs: list[ServiceRun]) -> None:
        """Stop ``runs``, each once everything that comes after it has stopped (the router first)."""
        async def stop(run: ServiceRun) -> None:
            after_it = [self.runs[name] for name in self.deployment.dependents(run.name)]
            if run.cfg.follower:      # after its rank 0, whose shutdown ends the others' schedulers
                after_it.append(self.runs[run.cfg.server])
            await self.launcher.until(lambda: all(d.state in (S.STOPPED, S.FAILED) for d in after_it))
            await run.stop(disable=self.intent.disable)

        for run in runs:
            run.task = asyncio.create_task(stop(run), name=f"stop {run.name}")

    def take_out_and_stop(self, runs: list[ServiceRun]) -> None:
        """``down SERVICE...``: stop ``runs`` alone, each backend under serving routers drained first (taken out of
        them, its requests finished); the rest of the deployment goes on as it runs. A server over several nodes
        goes as one, named by any of its ranks."""
        for run in dict.fromkeys(self.runs[run.cfg.server] for run in runs):
            self.draining.add(run.name)
            self._ask(self._drained_stop(run), f"drain and stop {run.name}")

    async def _drained_stop(self, run: ServiceRun) -> None:
        drain = None
        try:
            routers = self._serving_routers(run, back=False) if self.intent.drain else []
            if routers:
                drain = await self._taken_out(run, routers, "stopping", back=False)
            else:
                for name in self.deployment.dependents(run.name):
                    if self.runs[name].state in SERVING_STATES:
                        self._notice(self.runs[name], "warning", f"{name} degraded: {run.name} is being stopped")
            for rank in self.ranks(run):
                if rank.task and not rank.task.done():
                    rank.task.cancel()       # its watch: the stop is no failure
            for rank in self.ranks(run):     # rank 0 first: its shutdown ends the others' schedulers
                await rank.stop(disable=self.intent.disable)
        finally:
            if drain is not None:
                self.launcher.emit(drain.told("stopped", self.launcher.elapsed()))
            self.draining.discard(run.name)
            self.launcher.changed()

    async def _taken_out(self, run: ServiceRun, routers: list[ServiceRun], doing: str, *, back: bool) -> Drain | None:
        """``run`` taken out of ``routers`` and left to finish its requests, each step told: its Drain (to put it
        back), or None when a router would not (told: ``doing`` it goes on as it is)."""
        self._tell_lone(run, routers, back=back)
        drain = Drain(run, routers, self.intent.drain_timeout, self.launcher.clock)
        where = ", ".join(r.name for r in routers)
        self._notice(run, "info", f"{run.name}: taking it out of {where} (drain, at most "
                                  f"{format_duration(self.intent.drain_timeout)})")
        try:
            await drain.take_out()
        except (RouterApiError, TimeoutError) as exc:
            self._notice(run, "warning", f"{run.name}: not drained ({exc}): {doing} it as it is")
            return None
        await drain.until_idle()
        self._notice(run, "info", self._drained_words(run, where, drain, doing))
        return drain

    def _serving_routers(self, run: ServiceRun, *, back: bool = True) -> list[ServiceRun]:
        """The routers in front of a backend that serve now and can take it out, and (``back``) back in (a drain
        takes it out of these). One whose worker API cannot put a worker back (vllm-router's, in PD mode) is told,
        once per backend, and left as it runs: a drain through it would leave the backend out for good."""
        if run.cfg.role not in BACKEND_ROLES:
            return []
        serving = [self.runs[name] for name in self.deployment.dependents(run.name)
                   if self.runs[name].cfg.is_router and self.runs[name].state in SERVING_STATES and self.runs[name].cfg.port]
        stuck = [router for router in serving if back and not router.serving.router_puts_back]
        if stuck and run.name not in self._told_undrained:
            self._told_undrained.add(run.name)
            names = ", ".join(router.name for router in stuck)
            self._notice(run, "warning", f"{run.name}: not drained out of {names}: its worker API cannot put a "
                                         "worker back; it goes on sending requests until its health checks notice")
        return [router for router in serving if router not in stuck]

    async def _roll(self, runs: list[ServiceRun]) -> None:
        """One at a time: each drained, restarted, proven and back in before the next begins; a service that is
        not back stops the roll there (the rest are left as they run). With ``--with-dependents`` a prefill's
        decodes are restarted in turn after it, before it goes back in (they keep its old transfer endpoints)."""
        restarted: set[str] = set()
        try:
            for n, run in enumerate(runs):
                if run.name in restarted:
                    continue
                self._notice(run, "info", f"{run.name}: rolling restart, {n + 1} of {len(runs)}")
                after = self._decodes_after(run) if self.intent.with_dependents else []
                self.draining.update(d.name for d in after)
                restarted.update(d.name for d in after)
                await self._restart_in_turn(run, after)
                if (state := self._worst(run)) not in SERVING_STATES:
                    rest = [r.name for r in runs[n + 1:]]
                    if rest:
                        self._notice(run, "error", f"rolling restart stopped at {run.name} ({state.value}): "
                                                   f"{', '.join(rest)} left as {'they run' if len(rest) > 1 else 'it runs'}")
                    return
        finally:
            self.rolling = False
            self.draining.difference_update(restarted | {run.name for run in runs})
            self.launcher.changed()

    async def _restart_in_turn(self, run: ServiceRun, after: Sequence[ServiceRun] = ()) -> None:
        """One service of a roll: drained when routers serve in front of it, else restarted and waited for."""
        if self._serving_routers(run):
            await self._drained_restart(run, after)
            return
        self._launch(run, Action.RESTART, reason="rolling restart")
        await self._until_settled(run)
        for decode in after:
            await self._restart_in_turn(decode)

    async def _drained_restart(self, run: ServiceRun, after: Sequence[ServiceRun] = ()) -> None:
        """Take ``run`` out of its routers, let it finish its requests, restart it, prove it, put it back; the
        decodes ``after`` it are restarted in turn once it is ready, before it is proven."""
        drain, outcome = None, "left out"
        try:
            routers = self._serving_routers(run)
            where = ", ".join(r.name for r in routers)
            drain = await self._taken_out(run, routers, "restarting", back=True)
            if drain is None:       # restarted as before: the routers wait for it and are proven again
                self._restart_now([run], with_dependents=False)
                await self._until_settled(run)      # a rolling restart goes on only once it is back
                return
            self._launch(run, Action.RESTART, reason="restart (drained)")
            await self._until_settled(run)
            if (state := self._worst(run)) in BAD_OUTCOMES:
                self._notice(run, "error", f"{run.name}: {state.value} after its restart: left out of {where}")
                return
            for decode in after:
                self._notice(decode, "info", f"{decode.name}: restarted after {run.name} (--with-dependents), before "
                                             f"{run.name} goes back in")
                await self._restart_in_turn(decode)
            down = [decode.name for decode in after if decode.state not in SERVING_STATES]
            if down:
                self._notice(run, "error", f"{run.name}: left out of {where}: {', '.join(down)} did not come back "
                                           f"after {'their restarts' if len(down) > 1 else 'its restart'}")
                return
            if await self._proven(run, routers):
                await drain.put_back()
                outcome = "back"
                self._notice(run, "info", f"{run.name}: back in {where}")
                for router in routers:
                    await router.serving_watch.canary_now()     # a generation through it again (its only pair, when it has one)
        except (RouterApiError, TimeoutError) as exc:
            self._notice(run, "error", f"{run.name}: not put back: {exc}")
        finally:
            if drain is not None:
                self.launcher.emit(drain.told(outcome, self.launcher.elapsed()))
            if not self.rolling:
                self.draining.discard(run.name)     # a rolling restart holds its services until the roll ends
                self.launcher.changed()

    async def _until_settled(self, run: ServiceRun) -> None:
        """Until a run just launched serves again (every rank of its server), or has failed (any)."""
        ranks = self.ranks(run)
        await self.launcher.until(lambda: all(r.state in SERVING_STATES for r in ranks)
                                  or any(r.state in BAD_OUTCOMES for r in ranks))

    def _worst(self, run: ServiceRun) -> ServiceState:
        """How its server is: its rank 0's state, unless another rank failed (then that rank's)."""
        return next((r.state for r in self.ranks(run) if r.state in BAD_OUTCOMES), run.state)

    def ranks(self, run: ServiceRun) -> list[ServiceRun]:
        """The runs of the server ``run`` is a rank of, rank 0 first (just ``run`` on one node)."""
        return [self.runs[name] for name in self.deployment.ranks_of(run.name)]

    def _server(self, service: str) -> ServiceRun | None:
        """The run a command names, as the server it is: a rank >= 1 stands for its server's rank 0."""
        run = self.runs.get(service)
        return self.runs[run.cfg.server] if run is not None else None

    def _launch(self, run: ServiceRun, action: Action, *, reason: str) -> None:
        """``action`` for every rank of ``run``'s server, together: one rank alone cannot rejoin the others."""
        for rank in self.ranks(run):
            self.launcher.launch(rank, action, reason=reason)

    async def _proven(self, run: ServiceRun, routers: list[ServiceRun]) -> bool:
        """Its pair with each peer proven directly before it goes back (the routers' pair probes); a failed pair
        fails it, out of the routers."""
        for router in routers:
            pairs = await router.proving.prove_pairs_with(run.name)
            broken = [p for p in pairs or () if not p.ok]
            if broken:
                first = broken[0]
                run.transition(S.FAILED, f"pair {first.prefill} → {first.decode} failed after its restart: "
                                         f"{first.detail}; left out of {router.name}")
                return False
        return True

    def _tell_lone(self, run: ServiceRun, routers: list[ServiceRun], *, back: bool = True) -> None:
        """A router with no other backend of this role serves nothing while it is out: said before it starts."""
        for router in routers:
            others = [n for n in router.cfg.after if n != run.name and self.runs[n].cfg.role == run.cfg.role
                      and self.runs[n].state in SERVING_STATES]
            if not others:
                until = "and serves again once it is back" if back else "until another is added"
                self._notice(router, "warning", f"{router.name}: {run.name} is its only {run.cfg.role}: it answers 503 "
                                                f"while {run.name} is out, {until}")

    @staticmethod
    def _drained_words(run: ServiceRun, where: str, drain: Drain, doing: str) -> str:
        left, in_transfer = drain.left, drain.left_in_transfer
        if left == 0:
            return f"{run.name}: out of {where}, no request left: {doing} it"
        if left is None:
            return f"{run.name}: out of {where}; at the drain's end it was not known whether requests were left"
        held = f"{left} request{'s' if left != 1 else ''} still held at the drain's end"
        if in_transfer:
            held += f" ({in_transfer} of them in a KV transfer)"
        return f"{run.name}: out of {where}; {held}: cut"

    def _notice(self, run: ServiceRun, level: str, text: str) -> None:
        self.launcher.emit(Notice(level, text, run.name, self.launcher.elapsed()))

    def _ask(self, work: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self.asked.add(task)
        task.add_done_callback(self.asked.discard)

    def _restart_dependents(self, runs: list[ServiceRun]) -> list[str]:
        """What a restart of ``runs`` touches beyond them: what comes after them; with ``--with-dependents``
        also the decodes beside a restarted prefill (they keep its transfer endpoints)."""
        names: dict[str, None] = {}
        for run in runs:
            names |= dict.fromkeys(self.deployment.dependents(run.name))
            if self.intent.with_dependents and run.cfg.role == "prefill":
                names |= dict.fromkeys(self._paired_decodes(run))
        return list(names)

    def _decodes_after(self, run: ServiceRun) -> list[ServiceRun]:
        """A prefill's decodes that serve: restarted after it in a rolling restart with ``--with-dependents``."""
        if run.cfg.role != "prefill":
            return []
        return [self.runs[name] for name in self._paired_decodes(run) if self.runs[name].state in SERVING_STATES]

    def _paired_decodes(self, prefill: ServiceRun) -> list[str]:
        """The decodes that share a router with ``prefill``: the ones that talk to it."""
        routers = self.deployment.routers_of(prefill.name)
        return [r.name for r in self.runs.values() if r.cfg.role == "decode"
                and any(router in routers for router in self.deployment.routers_of(r.name))]

    def _warn_lone_prefill(self, runs: list[ServiceRun], with_dependents: bool) -> None:
        """A prefill restarted under a decode that keeps running: the decode still holds the old one's endpoints."""
        if with_dependents:
            return
        for run in runs:
            staying = [d for d in self._paired_decodes(run) if self.runs[d] not in runs] if run.cfg.role == "prefill" else []
            if staying:
                self.launcher.emit(Notice(
                    "warning", f"{run.name}: restarted while {', '.join(staying)} keeps running: SGLang's decode keeps "
                    "the transfer endpoints of the prefill it first reached for its whole life; restart "
                    f"{', '.join(staying)} too, or use --with-dependents", run.name, self.launcher.elapsed()))


    def _tell_prefill_roll(self, runs: list[ServiceRun], with_dependents: bool) -> None:
        """Before a rolling restart of prefills: their decodes keep the old endpoints, and what is done about it."""
        for run in runs:
            decodes = self._paired_decodes(run) if run.cfg.role == "prefill" else []
            if not decodes:
                continue
            names = ", ".join(decodes)
            if with_dependents:
                text = (f"{run.name}: rolling restart of a prefill: SGLang's decode keeps the transfer endpoints of the "
                        f"prefill it first reached, so {names} restart in turn after it, before it goes back in")
            else:
                text = (f"{run.name}: rolling restart of a prefill: SGLang's decode keeps the transfer endpoints of the "
                        f"prefill it first reached; every pair with {run.name} is proven again before it goes back, "
                        f"a pair that fails is named and keeps it out until that decode is restarted "
                        f"(--with-dependents restarts {names} in turn)")
            self.launcher.emit(Notice("warning", text, run.name, self.launcher.elapsed()))

def busy(run: ServiceRun) -> bool:
    """Starting, stopping, or about to (a restart asked for already, waiting for its turn)."""
    under_way = run.task is not None and not run.task.done()
    return run.state in BUSY_NOW or (run.state is S.PENDING and under_way)
