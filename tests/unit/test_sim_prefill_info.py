"""A sim decode's look-ups in the prefills' bootstrap servers: one per address that answered, again after a failure."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pdtui.sim.bootstrap import BootstrapUnreachable, PrefillInfo


class Bootstraps:
    """Stand-in look-ups: counts them by address; those in ``down`` fail as a refused connection does."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.down: set[int] = set()

    def __call__(self, host: str, port: int) -> dict[str, Any]:
        self.asked[f"{host}:{port}"] += 1
        if port in self.down:
            raise BootstrapUnreachable("Error fetching prefill parallel info from bootstrap: refused")
        return {"port": port}


def test_each_address_is_asked_once_and_its_answer_kept() -> None:
    bootstraps = Bootstraps()
    info = PrefillInfo(fetch=bootstraps)
    for _ in range(3):
        assert info.ensure("127.0.0.1", 9001) == {"port": 9001}
        assert info.ensure("127.0.0.1", 9002) == {"port": 9002}
    assert info.ensure("10.0.0.2", 9001) == {"port": 9001}
    assert bootstraps.asked == {"127.0.0.1:9001": 1, "127.0.0.1:9002": 1, "10.0.0.2:9001": 1}


def test_a_failed_look_up_is_not_kept_so_the_next_request_asks_again() -> None:
    bootstraps = Bootstraps()
    bootstraps.down.add(9001)
    info = PrefillInfo(fetch=bootstraps)
    for _ in range(2):
        with pytest.raises(BootstrapUnreachable):
            info.ensure("127.0.0.1", 9001)
    bootstraps.down.clear()
    assert info.ensure("127.0.0.1", 9001) == {"port": 9001}
    info.ensure("127.0.0.1", 9001)
    assert bootstraps.asked["127.0.0.1:9001"] == 3


def test_an_unreachable_port_is_refused_without_a_look_up() -> None:
    bootstraps = Bootstraps()
    info = PrefillInfo(unreachable={9001}, fetch=bootstraps)
    with pytest.raises(BootstrapUnreachable, match=r"port=9001\).*\[Errno 111\] Connection refused"):
        info.ensure("127.0.0.1", 9001)
    assert info.ensure("127.0.0.1", 9002) == {"port": 9002}
    assert bootstraps.asked == {"127.0.0.1:9002": 1}
