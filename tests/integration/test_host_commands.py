"""Commands on a host: a cancel at any moment, or the session's close, ends them and leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from pdtui.hosts.local import LocalHost
from pdtui.targets.systemd.host_session import HostSession
from pdtui.targets.systemd.settings import HostConfig

SLEEPER = [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"]


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 5, 8])
async def test_a_command_cancelled_while_it_spawns_ends_at_once(turns: int) -> None:
    """Cancelled within its first loop turns (while its pipes connect), the command still ends: CPython 3.11's
    spawn, cancelled there, would wait for ever for pipes that never connected."""
    for _ in range(5):
        task = asyncio.create_task(LocalHost().run(SLEEPER, timeout=30))
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        async with asyncio.timeout(10):
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_a_cancelled_command_is_stopped() -> None:
    host = LocalHost()
    async with host.stream(SLEEPER) as lines:
        pid = int((await anext(aiter(lines))).decode())
    assert _gone(pid)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_closing_a_session_stops_a_look_whose_asker_is_gone(tmp_path) -> None:
    """A batched look runs in its own task: the asker's cancel leaves it running, the session's close ends it
    (a task left for the event loop's own close was where a cancelled spawn could hang)."""
    marker = tmp_path / "pid"
    slow = [sys.executable, "-c", f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(60)"]
    session = HostSession(HostConfig(name="h", local=True, commands={"systemctl": slow}), LocalHost(),
                          command_timeout=30)
    look = asyncio.create_task(session.looker.show("a.service"))
    async with asyncio.timeout(20):
        while not marker.exists() or not marker.read_text():
            await asyncio.sleep(0.02)
    look.cancel()
    await asyncio.gather(look, return_exceptions=True)
    async with asyncio.timeout(10):
        await session.close()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert _gone(int(marker.read_text()))


STUBBORN = [sys.executable, "-c", "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print(os.getpid(), flush=True); time.sleep(60)"]


async def test_a_command_that_ignores_sigterm_is_killed_and_reaped_though_its_asker_is_cancelled_again(
        tmp_path, monkeypatch) -> None:
    """The asker cancelled a second time while the stopped command still runs: the command is killed after its grace
    and reaped all the same (one left unreaped outlives the event loop, and asyncio complains of it on stderr)."""
    monkeypatch.setattr("pdtui.hosts.local.STOP_GRACE", 0.3)
    host = LocalHost()
    pid_file = tmp_path / "pid"
    argv = [*STUBBORN[:2], STUBBORN[2].replace("print(os.getpid(), flush=True)",
                                               f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))")]
    task = asyncio.create_task(host.run(argv, timeout=30))
    async with asyncio.timeout(20):
        while not pid_file.exists() or not pid_file.read_text():
            await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.sleep(0.05)
    task.cancel()
    async with asyncio.timeout(10):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert _reaped(int(pid_file.read_text()))


async def test_closing_the_host_stops_and_reaps_a_command_still_running() -> None:
    host = LocalHost()
    stream = host.stream(SLEEPER)
    lines = await stream.__aenter__()
    pid = int((await anext(aiter(lines))).decode())
    async with asyncio.timeout(10):
        await host.close()
    assert _reaped(pid)
    await stream.__aexit__(None, None, None)


def _reaped(pid: int) -> bool:
    """Gone, not a zombie: nobody is left to wait for it."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return _gone(pid)
    return False
