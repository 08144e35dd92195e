"""A Slurm cluster of a deployment, as the engine uses it: its login host's connection and Slurm through it.

A :class:`ClusterSession` is a :class:`Session` (one connection, commands
within a deadline, HTTP probes through it: to the nodes its jobs run on) that
also submits, looks at and cancels jobs. Looks at the jobs of a cluster that
come at the same moment share one ``squeue`` (the services look on a common
beat), as a host's unit looks share one ``systemctl show``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from pdtui.engine.batcher import Batcher
from pdtui.engine.log_entry import LogEntry
from pdtui.engine.session import Session
from pdtui.engine.states import ServiceState
from pdtui.hosts.base import Host, HostError, Result
from pdtui.targets.slurm.commands import SlurmCommands
from pdtui.targets.slurm.job_output import JobOutput
from pdtui.targets.slurm.parse import (
    JobDetail,
    JobRow,
    accounting_off,
    parse_job,
    parse_node,
    parse_sacct,
    parse_squeue,
    parse_submitted,
)
from pdtui.targets.slurm.script import JobScript
from pdtui.targets.slurm.settings import ClusterConfig

if TYPE_CHECKING:
    from pdtui.engine.preflight import Reacher
    from pdtui.engine.service_run import ServiceRun
    from pdtui.targets.slurm.job_run import JobRun


class JobLooker(Batcher[SlurmCommands]):
    """``squeue`` of a cluster's jobs by name, batched: one command for every name asked at once."""

    last_took = 0.0     # seconds the last look took: a slow login host is looked at less often

    async def jobs(self, name: str) -> list[JobRow]:
        """Every job of this name (the user's) Slurm still lists, oldest first."""
        return await self._ask(name)

    async def _answers(self, names: list[str], deadline: float | None) -> dict[str, list[JobRow]]:
        started = time.monotonic()
        try:
            result = await self._run(self._commands.queue(names), deadline)
        finally:
            self.last_took = time.monotonic() - started
        if not result.ok:
            raise HostError(f"squeue failed: {result.last_words}")
        by_name: dict[str, list[JobRow]] = {name: [] for name in names}
        for row in parse_squeue(result.stdout):
            if row.name in by_name:
                by_name[row.name].append(row)
        return {name: sorted(rows, key=lambda r: int(r.job_id) if r.job_id.isdigit() else 0)
                for name, rows in by_name.items()}


class ClusterSession(Session):
    """One cluster: its login host and Slurm's clients on it."""

    looker: JobLooker

    def __init__(self, config: ClusterConfig, host: Host, *, command_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config.name, host, command_timeout=command_timeout, clock=clock)
        self.config = config
        self.slurm = SlurmCommands.for_cluster(config)
        self.looker = JobLooker(self.read, self.slurm)
        self.batchers = [self.looker]
        self._addresses: dict[str, str] = {}

    async def preflight(self, runs: Sequence[ServiceRun], reacher: Reacher, *, starting: bool) -> bool:
        """The login host reached and Slurm answering: each job's name looked up (one squeue for all)."""
        jobs = cast("Sequence[JobRun]", runs)     # a cluster's services are its jobs
        looks = await asyncio.gather(*(reacher.reach(run.look) for run in jobs), return_exceptions=True)
        ok = True
        for run, found in zip(runs, looks, strict=True):
            if isinstance(found, HostError):
                run.transition(ServiceState.FAILED, str(found) if str(found).startswith(self.name)
                               else f"{self.name}: {found}")
                ok = False
            elif isinstance(found, BaseException):
                raise found
        return ok

    async def jobs(self, name: str) -> list[JobRow]:
        return await self.looker.jobs(name)

    async def submit(self, script: JobScript, deadline: float | None = None) -> tuple[str | None, str]:
        """Write the script on the login host and submit it: (its job id, "") or (None, what sbatch said)."""
        submission = self.slurm.submit(script.folder, script.path, script.text)
        result = await self.command(submission.argv, deadline, input=submission.input)
        job_id = parse_submitted(result.stdout) if result.ok else None
        return job_id, "" if job_id else result.last_words

    async def detail(self, job_id: str) -> JobDetail | None:
        """``scontrol show job -d``: its node and GPUs; None once Slurm has forgotten it."""
        result = await self.read(self.slurm.show_job(job_id))
        return parse_job(result.stdout) if result.ok else None

    async def address(self, node: str) -> str:
        """Where a node is reached (its NodeAddr; its name when Slurm does not say), asked once per node."""
        if node not in self._addresses:
            result = await self.read(self.slurm.show_node(node))
            found = parse_node(result.stdout).get("NodeAddr") if result.ok else None
            self._addresses[node] = found or node
        return self._addresses[node]

    async def accounted(self, name: str) -> list[JobRow] | None:
        """This name's jobs in the accounting database, oldest first; None when the cluster keeps none."""
        result = await self.read(self.slurm.accounting([name]))
        if not result.ok:
            if accounting_off(result.stderr):
                return None
            raise HostError(f"{self.name}: sacct failed: {result.last_words}")
        return parse_sacct(result.stdout)

    async def cancel(self, name: str, deadline: float | None = None) -> Result:
        """``scancel`` every job of this name (the user's)."""
        return await self.command(self.slurm.cancel_named(name), deadline)

    def output(self, path: str, job_id: str, on_entry: Callable[[LogEntry], None],
               on_problem: Callable[[str], None]) -> JobOutput:
        """The follower of one job's output file."""
        return JobOutput(self.host, path, job_id, on_entry, on_problem)
