"""One Slurm job's output file, followed through the cluster's login host: a job's journal.

``tail -F -n +1 FILE`` runs in one channel from the job's submission on: it
waits for the file (a pending job has none yet), then hands every line from
the first, as it is written (the file lives on a folder the nodes and the
login host share). Each line becomes a :class:`LogEntry` of the job's
invocation (its job id), so a job's run judges it as a unit's run judges its
journal. When the stream breaks (a dropped SSH connection), the tail is
opened again after the last line delivered: no line is lost and none is
delivered twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pdtui.engine.log_entry import YIELD_EVERY, LogEntry
from pdtui.hosts.base import Host, HostError, HostNotFound, HostUnreachable
from pdtui.support.backoff import Backoff
from pdtui.targets.slurm.commands import follow


class JobOutput:
    """Follows one job's output file and hands each line to ``on_entry``."""

    def __init__(self, host: Host, path: str, job_id: str, on_entry: Callable[[LogEntry], None],
                 on_problem: Callable[[str], None] = lambda message: None,
                 clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self.path = path
        self.job_id = job_id
        self.on_entry = on_entry
        self._on_problem = on_problem
        self._clock = clock
        self.delivered = 0
        self._told: str | None = None
        self._progress = asyncio.Event()       # set whenever lines were delivered

    async def run(self) -> None:
        """Follow until cancelled, reopening after every break (a host that cannot be reached tells so itself)."""
        backoff = Backoff()
        while True:
            before = self.delivered
            try:
                await self._follow_once()
            except HostNotFound:
                return
            except HostUnreachable:
                pass
            except HostError as exc:
                self._problem(str(exc))
            if self.delivered > before:
                backoff.reset()
                self._told = None
            await asyncio.sleep(backoff.next())

    async def _follow_once(self) -> None:
        async with self.host.stream(follow(self.path, self.delivered + 1)) as lines:   # after those delivered
            async for batch in lines.batches():
                for start in range(0, len(batch), YIELD_EVERY):
                    if start:
                        await asyncio.sleep(0)   # a burst must not hold the loop
                    self._deliver(batch[start:start + YIELD_EVERY])
        status = getattr(lines, "exit_status", None)
        if status:
            detail = getattr(lines, "stderr", "") or f"exit status {status}"
            self._problem(f"{self.host.name}: following {self.path} stopped: {detail.splitlines()[-1]}")

    def _deliver(self, raw_lines: list[bytes]) -> None:
        now = self._clock()
        for raw in raw_lines:
            self.delivered += 1
            text = raw.decode("utf-8", errors="replace").removesuffix("\r")
            self.on_entry(LogEntry(f"{self.job_id}:{self.delivered}", now, None, self.job_id, None, text))
        self._progress.set()

    async def caught_up(self, lines: int, timeout: float) -> bool:
        """Wait until ``lines`` lines were delivered (the file's length as the login host counts it: a job that
        ended wrote its last ones just before); False when they are not in after ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                while self.delivered < lines:
                    self._progress.clear()
                    await self._progress.wait()
        except TimeoutError:
            return False
        return True

    def _problem(self, message: str) -> None:
        """Tell a problem once: a tail retrying every few seconds must not repeat it each time."""
        if message != self._told:
            self._told = message
            self._on_problem(message)
