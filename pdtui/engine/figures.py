"""The serving figures of the services on screen: sampled every few seconds, only while shown and serving.

A face says which services it shows (:meth:`FiguresWatch.show`); nothing is
fetched for the others, nor for anyone when no face asks (headless). Each
sample is one ``GET /metrics`` through the host's own connection (the SSH
connection of a remote host). A server that answers 404 there runs without
``--enable-metrics``: its batch lines, judged as they come, give its figures
instead. A router whose unit pdtui generates (a ``launch:`` block) is read at
the Prometheus port its unit was given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from pdtui.config import Deployment
from pdtui.engine.checks.http_status import polled
from pdtui.engine.events import Event, Notice, ServingFigures
from pdtui.engine.states import SERVING_STATES
from pdtui.servers import serving_for
from pdtui.vocabulary.figures import Figures

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

SAMPLED_ROLES = ("prefill", "decode")     # the servers (and the routers pdtui made the units of)
FETCH_TIMEOUT = 5.0     # seconds for one read of a server's /metrics


class FiguresWatch:
    def __init__(self, deployment: Deployment, runs: Mapping[str, ServiceRun], *, emit: Callable[[Event], None],
                 clock: Callable[[], float], elapsed: Callable[[], float], interval: float) -> None:
        self._runs = runs
        self._ports = {name: cfg.port for name, cfg in deployment.services.items() if cfg.role in SAMPLED_ROLES and cfg.port
                       and not cfg.follower}     # a rank >= 1 serves no figures of its own
        for serving in {serving_for(cfg).name: serving_for(cfg) for cfg in deployment.services.values()}.values():
            self._ports |= serving.metrics_ports(deployment)
        self._emit = emit
        self._clock = clock
        self._elapsed = elapsed
        self._interval = interval
        self._shown: frozenset[str] = frozenset()
        # Per attempt (a restarted server's counters start again, and it may have gained --enable-metrics):
        self._last: dict[tuple[str, int], tuple[Any, Figures]] = {}     # the last sample and its figures
        self._task: asyncio.Task | None = None

    def show(self, services: Collection[str]) -> None:
        """Sample these services from now on (the SGLang servers and readable routers among them), and only these."""
        self._shown = frozenset(name for name in services if name in self._ports)
        if self._shown and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._samples(), name="serving figures")

    async def _samples(self) -> None:
        """A sample of every shown server that serves, every interval, while any is shown."""
        while self._shown:
            serving = [self._runs[name] for name in sorted(self._shown) if self._runs[name].state in SERVING_STATES]
            await asyncio.gather(*(self._sample(run) for run in serving))
            await asyncio.sleep(self._interval)

    async def _sample(self, run: ServiceRun) -> None:
        key = (run.name, run.attempt.number)
        if not run.attempt.without_metrics:     # else its batch lines give its figures
            result = await run.session.prober.get(self._ports[run.name], polled(run.cfg, "/metrics"), timeout=FETCH_TIMEOUT,
                                                    address=run.address)
            if result.ok:
                last = self._last.get(key)
                text = result.body.decode(errors="replace")
                if self._ports[run.name] == run.cfg.port:
                    run.metrics.keep(text)      # its transfer watch reads this one rather than the server again
                try:
                    sample, figures = run.serving.figures(text, self._clock(),
                                                          last[0] if last is not None else None, run.cfg.role)
                except (ValueError, KeyError, IndexError, TypeError):   # hostile or broken text: not figures
                    run.attempt.without_metrics = True     # not Prometheus text: read its lines instead
                else:
                    self._last[key] = sample, figures
                    self._emit(ServingFigures(run.name, "metrics", figures, elapsed=self._elapsed()))
                    self._tell_failed_transfers(run, last[1] if last is not None else None, figures)
                    return
            elif result.status == 404:
                run.attempt.without_metrics = True
            else:
                return      # no answer this time: the last figures stand until the next sample
        batch = run.attempt.batch(run.serving.batch_figures)
        if batch is not None:
            self._emit(ServingFigures(run.name, "log", batch, run.serving.metrics_hint, self._elapsed()))

    def _tell_failed_transfers(self, run: ServiceRun, last: Figures | None, figures: Figures) -> None:
        before = last.kv_failed or 0 if last is not None else 0
        words = failed_transfers(run.name, before, figures.kv_failed, run.serving.failed_transfers_series)
        if words is not None:
            self._emit(Notice("warning", words, run.name, self._elapsed()))

    async def close(self) -> None:
        self._shown = frozenset()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def failed_transfers(service: str, before: int, now: int | None, series: str) -> str | None:
    """A rising failed-transfer counter as a warning, told when it passes the 1st, 10th, 100th... failure since
    the server started (its own log's line on each one is told as it comes); None when there is nothing to tell."""
    if now is None or now <= before or not any(before < 10 ** power <= now for power in range(len(str(now)))):
        return None
    return (f"{service}: KV transfers failing: {now} since it started ({series}), {now - before} "
            f"since the last sample")
