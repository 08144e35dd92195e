"""A backend taken out of the routers in front of it, drained, and put back once it is proven again.

A restart (or stop) of a prefill or decode under serving routers goes through
:class:`Drain`: each router is told to send it nothing new (its worker API,
engine/router_workers.py), until no router lists it; then pdtui waits until
the backend itself holds no request running, queued or for a KV transfer (a
prefill's KV its decodes have not taken yet, a decode's requests waiting for
theirs): its ``/metrics``, else its batch lines, which say nothing of
transfers (a server with work logs a batch line every few hundred
milliseconds), or until the drain timeout passes, and says what that cut.
Once the backend is ready again, the caller proves it and puts it back
(:meth:`Drain.put_back`): the routers health-check it, then route to it. The
routers are never restarted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pdtui.config.fields import format_duration
from pdtui.engine.checks.workers import Backend, worker_matches
from pdtui.engine.events import Drained
from pdtui.engine.router_workers import RouterWorker, RouterWorkers
from pdtui.engine.service_run import ServiceRun

IDLE_POLL = 0.5        # seconds between looks at a draining backend's own figures
QUIET_BATCHES = 3.0    # seconds without a batch line: a server without /metrics has no request left
BACK_IN = 60.0         # seconds for a router to list a backend put back as healthy (its health check's first pass)


@dataclass(slots=True)
class Drain:
    """One backend's way out of its routers and back in (see the module's docstring)."""

    backend: ServiceRun
    routers: list[ServiceRun]
    timeout: float
    clock: Callable[[], float]
    removed: list[tuple[ServiceRun, RouterWorkers, RouterWorker]] = field(default_factory=list)
    began: float | None = None       # when it was taken out
    out_at: float | None = None      # when no router listed it any more
    idle_at: float | None = None     # when it had no request left, or the drain's timeout ended the wait
    left: int | None = None          # requests still held then (0: none, None: not known)
    left_in_transfer: int | None = None   # ... of them for a KV transfer (None: its figures do not say)
    back_at: float | None = None     # when every router listed it healthy again

    def _api(self, router: ServiceRun) -> RouterWorkers:
        assert router.cfg.port is not None
        return RouterWorkers(router.name, router.prober, router.cfg.port, router.address, clock=self.clock,
                             key_env=router.cfg.api_key_env)

    async def take_out(self) -> None:
        """Every router in front of it stops sending it requests; back once none lists it (RouterApiError: one
        refused, and what was taken out so far is put back)."""
        backend = self.backend
        self.began = self.clock()
        for router in self.routers:
            api = self._api(router)
            names = Backend(backend.name, backend.cfg.role, backend.cfg.port or 0, backend.names_for(router.cfg))
            try:
                for worker in await api.listed():
                    if worker_matches(worker.url, names):
                        await api.remove(worker)
                        self.removed.append((router, api, worker))
            except Exception:
                await self.put_back()
                raise
        deadline = self.clock() + self.timeout
        gone = await asyncio.gather(*(api.until_gone(worker.url, max(0.0, deadline - self.clock()))
                                      for _, api, worker in self.removed))
        late = [api.name for (_, api, _), out in zip(self.removed, gone, strict=True) if not out]
        if late:
            raise TimeoutError(f"{', '.join(late)} still list{'s' if len(late) == 1 else ''} {backend.name} "
                               f"{format_duration(self.timeout)} after it was taken out")
        self.out_at = self.clock()

    async def until_idle(self) -> int | None:
        """Wait until it holds no request (running, queued or for a KV transfer), at most the drain's timeout: 0
        when idle, the number still held at the timeout (None: not known then)."""
        deadline = self.clock() + self.timeout
        while True:
            left, in_transfer = await self._requests_left()
            if left == 0 or self.clock() >= deadline:
                self.idle_at, self.left, self.left_in_transfer = self.clock(), left, in_transfer
                return left
            await asyncio.sleep(IDLE_POLL)

    def told(self, outcome: str, elapsed: float) -> Drained:
        """The drain as the faces and the history keep it, once it is over (``outcome``: how it ended)."""
        began = self.began if self.began is not None else self.clock()
        return Drained(self.backend.name, tuple(r.name for r in self.routers), outcome,
                       None if self.idle_at is None else self.idle_at - began, self.left,
                       None if self.back_at is None else self.back_at - began, elapsed, self.left_in_transfer)

    async def _requests_left(self) -> tuple[int | None, int | None]:
        """Its requests running, queued and for a KV transfer, and of them those for a transfer: from its
        ``/metrics``, else from its latest batch line since it was taken out (none for :data:`QUIET_BATCHES`: none
        left; none yet: not known), which says nothing of transfers."""
        run = self.backend
        attempt = run.attempt
        figures = await run.metrics.read(lambda text: run.serving.figures(text, self.clock(), None, run.cfg.role)[1])
        if figures is not None and figures.running is not None:
            return figures.running + (figures.queued or 0) + (figures.in_transfer or 0), figures.in_transfer
        since = self.out_at if self.out_at is not None else self.clock()
        latest = attempt.batch_at if attempt.batch_at is not None and attempt.batch_at >= since else None
        if self.clock() - (latest if latest is not None else since) >= QUIET_BATCHES:
            return 0, None        # a server with requests logs a batch line every few hundred milliseconds
        batch = attempt.batch(run.serving.batch_figures)
        if latest is None or batch is None:
            return None, None
        return (batch.running or 0) + (batch.queued or 0), None

    async def put_back(self) -> None:
        """Register it again with every router it was taken out of, and wait until each lists it healthy."""
        removed, self.removed = self.removed, []
        await asyncio.gather(*(self._back(router, api, worker) for router, api, worker in removed))
        self.back_at = self.clock()

    async def _back(self, router: ServiceRun, api: RouterWorkers, old: RouterWorker) -> None:
        if not await api.until_gone(old.url, self.timeout):     # smg refuses a URL it still drains
            raise TimeoutError(f"{api.name} still drains {self.backend.name}: it cannot be put back")
        url = self.backend.url_for(router.cfg) or old.url      # a job restarted on another node has a new one
        worker = replace(old, id=url, url=url)
        await api.add(worker)
        deadline = self.clock() + BACK_IN
        while not any(w.url == worker.url and w.healthy for w in await api.listed()):
            if self.clock() >= deadline:
                raise TimeoutError(f"{api.name} did not list {self.backend.name} as healthy within "
                                   f"{format_duration(BACK_IN)} of putting it back")
            await asyncio.sleep(IDLE_POLL)
