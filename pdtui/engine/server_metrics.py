"""A server's ``/metrics`` as its run asks them: read by its serving engine's parser, given up on for a start that
has none.

A server started without ``--enable-metrics`` answers 404, and an endpoint
that answers something other than Prometheus's text has none to read either:
neither is asked again in that start (its batch lines tell its figures).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from pdtui.engine.checks.http_status import polled
from pdtui.engine.figures import FETCH_TIMEOUT
from pdtui.vocabulary.figures import KvTotals

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

T = TypeVar("T")


class ServerMetrics:
    """One run's ``/metrics``, for this start of its server."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run

    @property
    def available(self) -> bool:
        """Whether its ``/metrics`` may be asked in this start (a port, and no answer yet that said it has none)."""
        return bool(self.run.cfg.port) and not self.run.attempt.without_metrics

    async def read(self, parse: Callable[[str], T]) -> T | None:
        """Its ``/metrics`` text read by ``parse`` (a serving engine's parser); None without them. A 404 (started
        without --enable-metrics) or text that is not Prometheus's is not asked again in this start."""
        run = self.run
        if not self.available:
            return None
        assert run.cfg.port is not None
        result = await run.prober.get(run.cfg.port, polled(run.cfg, "/metrics"), timeout=FETCH_TIMEOUT,
                                      address=run.address)
        if not result.ok:
            run.attempt.without_metrics = result.status == 404
            return None
        try:
            return parse(result.body.decode(errors="replace"))
        except (ValueError, KeyError, IndexError, TypeError):   # not Prometheus text
            run.attempt.without_metrics = True
            return None

    async def kv_totals(self) -> tuple[str, KvTotals | None]:
        """Its KV transfer series summed over its ranks, by its service's name (None without them)."""
        return self.run.name, await self.read(self.run.serving.kv_totals)
