"""Reads asked of one host at the same moment, run as one remote command.

Over SSH every command is a session of its own: sshd forks, the user's login
shell starts, then the command. On a loaded host those start-ups do not
overlap: one ``true`` took 87 ms here, four at once 436 ms. A preflight asks
four reads of a host at once (its units' look, their files, the GPU inventory,
the journal's newest entry); :class:`SharedReads` runs such reads, gathered
for :data:`READ_WINDOW`, one after another in one ``sh``, and hands each asker
its own :class:`~pdtui.hosts.base.Result`: its stdout, stderr and exit status
as if it had run alone.

Each part's stdout and stderr are closed by a line that carries a marker made
afresh for each command: what a part prints (a journal entry, a unit file)
cannot forge it. Only reads share a command (a caller says so): a ``systemctl
stop`` may take minutes, and a look must not wait behind it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from pdtui.hosts.base import HostError, HostTimedOut, Result

READ_WINDOW = 0.01
"""Seconds the first read waits for others to share its command (a remote command costs tens of milliseconds)."""
SCRIPT_NAME = "pdtui-reads"
"""The shared command's name (``$0``), as ``ps`` on the host shows it."""

RunOne = Callable[[Sequence[str], "float | None"], Awaitable[Result]]


@dataclass(slots=True)
class _Ask:
    argv: tuple[str, ...]
    timeout: float | None
    answer: asyncio.Future[Result] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class SharedReads:
    """The reads of one host, gathered into shared remote commands (``run_one`` runs one command there)."""

    def __init__(self, name: str, run_one: RunOne, window: float = READ_WINDOW) -> None:
        self.name = name
        self._run_one = run_one
        self._window = window
        self._asked: list[_Ask] = []
        self._commands: set[asyncio.Task] = set()     # gathering or running: ended at close

    async def run(self, argv: Sequence[str], timeout: float | None) -> Result:
        """``argv``'s result, run in the next shared command, within ``timeout``."""
        if not argv:
            return await self._run_one(argv, timeout)    # the host's own refusal of an empty command
        ask = _Ask(tuple(argv), timeout)
        self._asked.append(ask)
        if len(self._asked) == 1:
            task = asyncio.create_task(self._gathered(), name=f"reads {self.name}")
            self._commands.add(task)
            task.add_done_callback(self._commands.discard)
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(ask.answer)
        except TimeoutError:
            ask.answer.cancel()     # no answer is kept for an asker that is gone
            raise HostTimedOut.after(self.name, argv, timeout) from None
        except asyncio.CancelledError:
            ask.answer.cancel()
            raise

    async def close(self) -> None:
        """End the shared commands under way (their askers get the cancellation)."""
        for task in list(self._commands):
            task.cancel()
        await asyncio.gather(*self._commands, return_exceptions=True)

    async def _gathered(self) -> None:
        try:
            await asyncio.sleep(self._window)
        except asyncio.CancelledError:
            self._fail(self._asked, None)
            self._asked = []
            raise
        asks, self._asked = self._asked, []
        try:
            results = await self._run(asks)
        except BaseException as exc:     # the command's failure is every asker's
            self._fail(asks, exc if isinstance(exc, Exception) else None)
            if not isinstance(exc, Exception):
                raise
            return
        for ask, result in zip(asks, results, strict=True):
            if not ask.answer.done():
                if isinstance(result, Result):
                    ask.answer.set_result(result)
                else:
                    ask.answer.set_exception(result)

    async def _run(self, asks: list[_Ask]) -> list[Result | HostError]:
        if len(asks) == 1:
            return [await self._run_one(asks[0].argv, asks[0].timeout)]
        timeouts = [ask.timeout for ask in asks]
        timeout = None if None in timeouts else max(t for t in timeouts if t is not None)
        mark = f"@@pdtui-{secrets.token_hex(8)}"
        argvs = [ask.argv for ask in asks]
        shared = await self._run_one(together(argvs, mark), timeout)
        return split(shared, argvs, mark, self.name)

    @staticmethod
    def _fail(asks: list[_Ask], exc: Exception | None) -> None:
        for ask in asks:
            if not ask.answer.done():
                if exc is None:
                    ask.answer.cancel()
                else:
                    ask.answer.set_exception(exc)


def together(argvs: Sequence[Sequence[str]], mark: str) -> list[str]:
    """One ``sh`` that runs each argv in turn, closing its stdout and its stderr each with a line of ``mark``, the
    part's number and (on stdout) its exit status. The line starts with a newline of its own: a part's output
    need not end in one, and :func:`split` takes that newline off again."""
    parts = [f'{" ".join(map(_quoted, argv))}; s=$?; printf "\\n%s {n}\\n" "$m" >&2; printf "\\n%s {n} %d\\n" "$m" "$s"'
             for n, argv in enumerate(argvs)]
    return ["sh", "-c", f"m={mark}\n" + "\n".join(parts), SCRIPT_NAME]


def _quoted(word: str) -> str:
    """A word quoted whatever it holds: a program named like a word of the shell's own (``if``, ``!``) is still run
    as a program, and nothing in it is expanded."""
    return "'" + word.replace("'", "'\"'\"'") + "'"


def split(shared: Result, argvs: Sequence[Sequence[str]], mark: str, host: str) -> list[Result | HostError]:
    """Each part's own Result from the shared command's output (:func:`together`); a part whose closing lines
    never came (the shell was ended before it) a HostError."""
    results: list[Result | HostError] = []
    out_at = err_at = 0
    for n, argv in enumerate(argvs):
        out_close, err_close = f"\n{mark} {n} ", f"\n{mark} {n}\n"     # stdout's is followed by the status
        out_end, err_end = shared.stdout.find(out_close, out_at), shared.stderr.find(err_close, err_at)
        status_end = shared.stdout.find("\n", out_end + len(out_close)) if out_end >= 0 else -1
        status = shared.stdout[out_end + len(out_close):status_end] if status_end >= 0 else ""
        if err_end < 0 or not status.isdigit():
            results.append(HostError(f"{host}: {argv[0]} ended before it answered ({shared.last_words})"))
            continue
        results.append(Result(tuple(argv), int(status), shared.stdout[out_at:out_end], shared.stderr[err_at:err_end]))
        out_at, err_at = status_end + 1, err_end + len(err_close)
    return results
