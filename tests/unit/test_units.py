import asyncio
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtui.engine.batcher import GATHER_WINDOW
from pdtui.hosts.base import HostError, Result
from pdtui.targets.systemd.commands import Commands, parse_show_units
from pdtui.targets.systemd.journal_json import parse_entry
from pdtui.targets.systemd.shared_commands import InvocationHistory, UnitLooker, UnitStarter, own_outcome


class FakeSystemctl:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    async def __call__(self, argv: list[str], deadline: float | None = None) -> Result:
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


async def test_looks_asked_while_a_command_runs_share_the_next_one():
    release = asyncio.Event()
    fake = FakeSystemctl()

    async def slow(argv, deadline=None):
        if not fake.calls:
            fake.calls.append(argv)
            await release.wait()
            return Result(tuple(argv), 0, "Id=a.service\nActiveState=active", "")
        return await fake(argv)
    looker = UnitLooker(slow, Commands())
    first = asyncio.ensure_future(looker.show("a.service"))
    await asyncio.sleep(0.05)
    later = asyncio.ensure_future(asyncio.gather(looker.show("b.service"), looker.show("c.service")))
    await asyncio.sleep(0.05)
    assert len(fake.calls) == 1, "no second command while the first runs"
    release.set()
    await first
    b, c = await later
    assert len(fake.calls) == 2 and fake.calls[1][-2:] == ["b.service", "c.service"]
    assert b["Id"] == "b.service" and c["Id"] == "c.service"


async def test_a_window_that_passed_while_the_loop_was_busy_sends_the_command_at_once():
    fake = FakeSystemctl()
    looker = UnitLooker(fake, Commands())
    asked = asyncio.ensure_future(looker.show("a.service"))
    await asyncio.sleep(0)                  # asked: the window opens
    time.sleep(GATHER_WINDOW * 2)           # the loop busy for longer (a fleet's thousand runs take their first step)
    for _ in range(5):                      # a few turns, far shorter than another window
        await asyncio.sleep(0)
    assert len(fake.calls) == 1, "the window counts from the ask, not from when the command's task first ran"
    assert (await asked)["Id"] == "a.service"


async def test_starts_asked_together_share_one_command_that_looks_at_them_too():
    fake = FakeSystemctl()
    starter = UnitStarter(fake, Commands())
    a, b = await asyncio.gather(starter.start("a.service"), starter.start("b.service"))
    assert len(fake.calls) == 1 and fake.calls[0][:2] == ["sh", "-c"] and fake.calls[0][-2:] == ["a.service", "b.service"]
    assert a.result.ok and b.result.ok
    assert a.props == {"Id": "a.service", "ActiveState": "active"} and b.props is not None and b.props["Id"] == "b.service"


FAKE_SYSTEMCTL = r"""
import sys
verb, units = sys.argv[1], [a for a in sys.argv[2:] if not a.startswith("-") and "," not in a]
if verb == "start":
    bad = [u for u in units if "bad" in u]
    if bad:
        sys.exit(print(f"Failed to start {bad[0]}: Unit {bad[0]} not found.", file=sys.stderr) or 5)
elif verb == "show":
    print("\n\n".join(f"Id={u}\nActiveState=active" for u in units))
"""


@pytest.mark.parametrize(("units", "status"), [(["a b.service", "c'$(x).service"], 0), (["bad.service"], 5)])
def test_a_start_and_its_look_in_one_command_keep_the_starts_status_and_errors_and_the_looks_output(units, status):
    argv = Commands(systemctl_prefix=(sys.executable, "-c", FAKE_SYSTEMCTL)).start_and_show(units)
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == status
    assert parse_show_units(done.stdout) == {u: {"Id": u, "ActiveState": "active"} for u in units}
    assert ("not found" in done.stderr) == (status != 0)


def test_a_failed_shared_start_is_told_to_the_unit_it_names():
    units = ["a.service", "b.service"]
    result = Result(("systemctl", "start", *units), 1, "",
                    "Job for b.service failed because the control process exited with error code.\n"
                    "See \"systemctl status b.service\" and \"journalctl -xeu b.service\" for details.\n")
    assert own_outcome(result, "a.service", units).ok
    b = own_outcome(result, "b.service", units)
    assert not b.ok and b.stderr.splitlines()[0].startswith("Job for b.service failed")


def test_a_unit_whose_name_ends_another_ones_is_not_blamed_for_it():
    units = ["a.service", "xa.service"]
    result = Result(("systemctl", "start", *units), 5, "", "Failed to start xa.service: Unit xa.service not found.\n")
    assert own_outcome(result, "a.service", units).ok and not own_outcome(result, "xa.service", units).ok


def test_a_failed_shared_start_naming_no_unit_is_everyones():
    units = ["a.service", "b.service"]
    result = Result(("sudo", "-n", "systemctl", "start", *units), 1, "", "sudo: a password is required\n")
    assert [own_outcome(result, u, units) for u in units] == [result, result]


async def test_a_history_read_stops_at_the_microsecond_from_which_the_tail_has_every_entry():
    calls = []

    async def journalctl(argv, deadline=None):
        calls.append(argv)
        return Result(tuple(argv), 0, "", "")
    since: list[float | None] = [None]
    history = InvocationHistory(journalctl, Commands(), until=lambda: since[0])
    await history.lines("i1")
    since[0] = parse_entry('{"__REALTIME_TIMESTAMP":"1796183821398352"}').realtime
    await history.lines("i1")
    assert not any(a.startswith("--until") for a in calls[0])
    assert "--until=@1796183821.398352" in calls[1]


@given(st.integers(0, 4_102_444_800_000_000))    # up to the year 2100
def test_a_journal_stamp_read_as_seconds_is_written_back_to_the_same_microsecond(stamp):
    realtime = parse_entry(f'{{"__REALTIME_TIMESTAMP":"{stamp}"}}').realtime
    assert f"{realtime:.6f}".replace(".", "").lstrip("0") == str(stamp).lstrip("0")


async def test_histories_asked_together_share_one_journalctl_and_are_split_by_invocation():
    calls = []

    async def journalctl(argv, deadline=None):
        calls.append(argv)
        lines = [f'{{"__CURSOR":"c{i}","_SYSTEMD_INVOCATION_ID":"{inv}","MESSAGE":"m{i}"}}'
                 for i, inv in enumerate(["i1", "i2", "i1", "other"])]
        return Result(tuple(argv), 0, "\n".join(lines), "")
    history = InvocationHistory(journalctl, Commands())
    (r1, one), (r2, two) = await asyncio.gather(history.lines("i1"), history.lines("i2"))
    assert len(calls) == 1 and calls[0][-5:] == ["_SYSTEMD_INVOCATION_ID=i1", "_SYSTEMD_INVOCATION_ID=i2", "+",
                                                 "INVOCATION_ID=i1", "INVOCATION_ID=i2"]
    assert r1.ok and [e.message for e in one] == ["m0", "m2"] and [e.message for e in two] == ["m1"]
