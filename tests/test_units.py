import asyncio

import pytest

from pdtui.engine.units import UnitLooker
from pdtui.hosts.base import HostError, Result
from pdtui.systemd import Commands


class FakeSystemctl:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def __call__(self, argv: list[str]) -> Result:
        self.calls.append(argv)
        await asyncio.sleep(0)
        if self.fail:
            raise HostError("gpu0: connection lost")
        units = [a for a in argv if a.endswith(".service")]
        out = "\n\n".join(f"Id={u}\nActiveState=active" for u in units if u != "gone.service")
        return Result(tuple(argv), 0, out, "")


async def test_looks_asked_together_share_one_command():
    fake = FakeSystemctl()
    looker = UnitLooker(fake, Commands())
    a, b, a2 = await asyncio.gather(looker.show("a.service"), looker.show("b.service"), looker.show("a.service"))
    assert len(fake.calls) == 1 and fake.calls[0][-2:] == ["a.service", "b.service"]
    assert a == a2 == {"Id": "a.service", "ActiveState": "active"} and b["Id"] == "b.service"


async def test_later_looks_get_a_new_command():
    fake = FakeSystemctl()
    looker = UnitLooker(fake, Commands())
    await looker.show("a.service")
    await looker.show("a.service")
    assert len(fake.calls) == 2


async def test_a_unit_missing_from_the_answer_is_not_found():
    looker = UnitLooker(FakeSystemctl(), Commands())
    assert (await looker.show("gone.service"))["LoadState"] == "not-found"


async def test_a_failed_command_fails_every_asker():
    looker = UnitLooker(FakeSystemctl(fail=True), Commands())
    results = await asyncio.gather(looker.show("a.service"), looker.show("b.service"), return_exceptions=True)
    assert all(isinstance(r, HostError) for r in results)
    with pytest.raises(HostError):
        await looker.show("a.service")
