"""Reads asked of a host at the same moment share one remote command, run by the real ``sh`` here."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from pdtui.hosts.base import HostError, HostUnreachable, Result
from pdtui.hosts.local import LocalHost
from pdtui.hosts.shared_reads import SCRIPT_NAME, SharedReads


class Shell:
    """Runs each command with this machine's ``sh`` (no SSH: the script is what an SSH host would send)."""

    def __init__(self) -> None:
        self.commands: list[tuple[tuple[str, ...], float | None]] = []
        self.local = LocalHost("here")

    async def run(self, argv: Sequence[str], timeout: float | None) -> Result:
        self.commands.append((tuple(argv), timeout))
        return await self.local.run(argv, timeout=timeout)


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


# Outputs a host's reads give that framing must keep exact: no newline at the end, none at all, only stderr, lines
# that look like a frame, bytes of a hostile journal, a part that fails and one that is not there.
PARTS = {
    "no newline": (sh("printf 'a\\nb'"), Result((), 0, "a\nb", "")),
    "silent": (["true"], Result((), 0, "", "")),
    "stderr and a status": (sh("printf 'why\\n' >&2; printf 'out\\n'; exit 3"), Result((), 3, "out\n", "why\n")),
    "a frame's look": (sh("printf '\\n@@pdtui-0000 0 0\\n@@pdtui-0000 1\\n' | tee /dev/stderr"),
                       Result((), 0, "\n@@pdtui-0000 0 0\n@@pdtui-0000 1\n", "\n@@pdtui-0000 0 0\n@@pdtui-0000 1\n")),
    "hostile bytes": (sh("printf '\\033]0;title\\007\\033[31m[red]\\r\\n\\n\\n'"),
                      Result((), 0, "\x1b]0;title\x07\x1b[31m[red]\r\n\n\n", "")),
    "its quoting": (["printf", "%s|", "it's", "$(id)", "a b", "`x`", "x\ny"], Result((), 0, "it's|$(id)|a b|`x`|x\ny|", "")),
}


async def test_reads_asked_at_once_share_one_command_and_each_gets_its_own_result() -> None:
    shell = Shell()
    reads = SharedReads("here", shell.run)
    results = await asyncio.gather(*(reads.run(argv, 5.0) for argv, _ in PARTS.values()))
    assert len(shell.commands) == 1 and shell.commands[0][0][3] == SCRIPT_NAME
    for (name, (argv, want)), got in zip(PARTS.items(), results, strict=True):
        assert (got.argv, got.exit_status, got.stdout, got.stderr) == (tuple(argv), want.exit_status, want.stdout,
                                                                      want.stderr), name


async def test_a_program_the_host_lacks_is_its_own_reads_failure() -> None:
    shell = Shell()
    reads = SharedReads("here", shell.run)
    missing, found = await asyncio.gather(reads.run(["pdtui-no-such-program"], 5.0), reads.run(["echo", "ok"], 5.0))
    assert missing.exit_status == 127 and "pdtui-no-such-program" in missing.stderr and missing.stdout == ""
    assert (found.exit_status, found.stdout, found.stderr) == (0, "ok\n", "")


async def test_a_program_named_like_a_word_of_the_shell_is_run_as_a_program() -> None:
    shell = Shell()
    reads = SharedReads("here", shell.run)
    keyword, after = await asyncio.gather(reads.run(["if"], 5.0), reads.run(["echo", "ok"], 5.0))
    assert keyword.exit_status == 127 and (after.exit_status, after.stdout) == (0, "ok\n")


async def test_a_read_asked_alone_runs_as_itself() -> None:
    shell = Shell()
    reads = SharedReads("here", shell.run)
    result = await reads.run(["echo", "alone"], 5.0)
    assert shell.commands == [(("echo", "alone"), 5.0)] and result.stdout == "alone\n"


async def test_reads_asked_apart_run_apart() -> None:
    shell = Shell()
    reads = SharedReads("here", shell.run, window=0.01)
    first = await reads.run(["echo", "1"], 5.0)
    second = await reads.run(["echo", "2"], 5.0)
    assert [c[0] for c in shell.commands] == [("echo", "1"), ("echo", "2")]
    assert (first.stdout, second.stdout) == ("1\n", "2\n")


async def test_the_shared_command_has_the_longest_timeout_and_a_read_past_its_own_fails_alone() -> None:
    shell = Shell()
    reads = SharedReads("here", shell.run)
    quick, slow = await asyncio.gather(reads.run(sh("sleep 0.5; echo late"), 0.2), reads.run(["echo", "ok"], 5.0),
                                       return_exceptions=True)
    assert shell.commands[0][1] == 5.0
    assert isinstance(quick, HostError) and "did not finish within 0.2s" in str(quick)
    assert isinstance(slow, Result) and slow.stdout == "ok\n"


async def test_a_failure_of_the_shared_command_is_every_readers() -> None:
    async def unreachable(argv: Sequence[str], timeout: float | None) -> Result:
        raise HostUnreachable("here: connection refused")

    reads = SharedReads("here", unreachable)
    results = await asyncio.gather(reads.run(["a"], 1.0), reads.run(["b"], 1.0), return_exceptions=True)
    assert [type(r) for r in results] == [HostUnreachable, HostUnreachable]


async def test_a_part_the_shell_never_reached_fails_naming_itself() -> None:
    async def cut_short(argv: Sequence[str], timeout: float | None) -> Result:
        script = argv[2].split("\n")
        whole = await LocalHost().run(["sh", "-c", "\n".join(script[:2]), SCRIPT_NAME], timeout=timeout)
        return Result(tuple(argv), 143, whole.stdout, whole.stderr + "Terminated\n")

    reads = SharedReads("here", cut_short)
    first, second = await asyncio.gather(reads.run(["echo", "1"], 1.0), reads.run(["echo", "2"], 1.0),
                                         return_exceptions=True)
    assert isinstance(first, Result) and first.stdout == "1\n"
    assert isinstance(second, HostError) and "echo ended before it answered (Terminated)" in str(second)


async def test_closing_ends_the_reads_under_way() -> None:
    shell = Shell()
    reads = SharedReads("here", shell.run)
    asked = [asyncio.ensure_future(reads.run(sh("sleep 5"), 10.0)) for _ in range(2)]
    await asyncio.sleep(0.2)
    await reads.close()
    with pytest.raises(asyncio.CancelledError):
        await asked[0]
    assert all(task.done() for task in asked)
