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
    """One run's ``/metrics``, for this start of its server, and the latest text read of them: a reader that can do
    with a text of a few seconds ago (the transfer watch) reads the one the shown figures read (engine/figures.py),
    not the server again."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        self._kept: tuple[int, float, str] | None = None     # the latest text: its start's number, when, the text

    def keep(self, text: str) -> None:
        """The text of a read of its ``/metrics`` made elsewhere (the figures'), for :meth:`read`'s ``fresh``."""
        self._kept = (self.run.attempt.number, self.run.w.clock(), text)

    @property
    def available(self) -> bool:
        """Whether its ``/metrics`` may be asked in this start (a port, and no answer yet that said it has none)."""
        return bool(self.run.cfg.port) and not self.run.attempt.without_metrics

    async def read(self, parse: Callable[[str], T], *, fresh: float = 0.0) -> T | None:
        """Its ``/metrics`` text read by ``parse`` (a serving engine's parser); None without them. A 404 (started
        without --enable-metrics) or text that is not Prometheus's is not asked again in this start. ``fresh``: a
        text read that many seconds ago at most, in this start, does instead of a new one."""
        run = self.run
        if not self.available:
            return None
        kept = self._kept
        if kept is not None and kept[0] == run.attempt.number and run.w.clock() - kept[1] <= fresh:
            text = kept[2]
        else:
            assert run.cfg.port is not None
            result = await run.prober.get(run.cfg.port, polled(run.cfg, "/metrics"), timeout=FETCH_TIMEOUT,
                                          address=run.address)
            if not result.ok:
                run.attempt.without_metrics = result.status == 404
                return None
            text = result.body.decode(errors="replace")
            self.keep(text)
        try:
            return parse(text)
        except (ValueError, KeyError, IndexError, TypeError):   # not Prometheus text
            run.attempt.without_metrics = True
            return None

    async def kv_totals(self) -> tuple[str, KvTotals | None]:
        """Its KV transfer series summed over its ranks, by its service's name (None without them)."""
        return self.run.name, await self.read(self.run.serving.kv_totals)
