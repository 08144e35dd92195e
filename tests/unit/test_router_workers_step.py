"""The router probe's workers step: a ``/workers`` answer read a moment ago is judged, not asked for again."""

from __future__ import annotations

import json

from pdtui.engine.checks.router import RouterProbe
from pdtui.engine.checks.workers import Backend
from pdtui.hosts.http import HttpResult

BACKENDS = [Backend("prefill", "prefill", 30000, frozenset({"127.0.0.1"})),
            Backend("decode", "decode", 30002, frozenset({"127.0.0.1"}))]


def listing(*healthy: bool) -> HttpResult:
    workers = [{"url": f"http://127.0.0.1:{b.port}", "worker_type": b.role, "is_healthy": ok}
               for b, ok in zip(BACKENDS, healthy, strict=True)]
    return HttpResult(200, json.dumps({"workers": workers, "total": len(workers)}).encode(), 0.001)


class Prober:
    """Answers ``/workers`` with every backend healthy, and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def get(self, port: int, path: str, **_: object) -> HttpResult:
        self.asked.append(path)
        return listing(True, True)


async def test_a_listing_read_a_moment_ago_in_which_every_backend_is_healthy_is_judged_as_it_is() -> None:
    prober = Prober()
    check = await RouterProbe(prober, 8000, BACKENDS)._workers(listing(True, True))  # type: ignore[arg-type]
    assert check.ok and prober.asked == []


async def test_a_listing_in_which_a_backend_was_not_healthy_yet_is_asked_for_again() -> None:
    prober = Prober()
    check = await RouterProbe(prober, 8000, BACKENDS)._workers(listing(True, False))  # type: ignore[arg-type]
    assert check.ok and prober.asked == ["/workers"], "the router may have activated it since"


async def test_without_a_listing_the_step_asks_for_one() -> None:
    prober = Prober()
    check = await RouterProbe(prober, 8000, BACKENDS)._workers()  # type: ignore[arg-type]
    assert check.ok and prober.asked == ["/workers"]
