"""One service run as a Slurm job: submitted, queued, running, then judged exactly as a unit's run is.

A :class:`JobRun` is a :class:`ServiceRun` whose steps that touch what runs
the service are a job's: its look is ``squeue`` (by the job's name, batched
for the cluster), its start is ``sbatch`` of the script made from the config,
its invocation is the job id, its journal the job's output file (followed from
its first line through the login host), its stop ``scancel``. What comes once
the job runs is the unit's: the same line judge, start-up phases, probes (to
its node's address, through the login host), router proof and watch.

A job waits in Slurm's queue first (QUEUED, with Slurm's reason) for up to
its ``queue_timeout``; its ``timeout`` counts from its start (Slurm's
RunTime), as a unit's counts from its start. A job that ends (FAILED,
CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ...) fails its service with
Slurm's words, unless a line of its output said more.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from dataclasses import replace

from pdtui.config import BACKEND_ROLES, Deployment, ServiceConfig
from pdtui.config.fields import format_duration
from pdtui.engine.events import JobStatus, Notice, ServiceInfo
from pdtui.engine.intent import Action
from pdtui.engine.readiness import LineJudge
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.states import JUDGED_STATES, ServiceState
from pdtui.gpus.nvidia_smi import gpu_ranges
from pdtui.hosts.base import LOOPBACK_ADDRESS, HostError
from pdtui.targets.slurm.cluster_session import ClusterSession
from pdtui.targets.slurm.commands import SlurmCommands, line_count
from pdtui.targets.slurm.job_output import JobOutput
from pdtui.targets.slurm.parse import JobRow, ended_words, first_host, hostnames, parse_elapsed
from pdtui.targets.slurm.script import job_of, output_path, render_script, script_path
from pdtui.targets.slurm.settings import JOBS, JobService, clusters_of, job_service

S = ServiceState
LABEL = re.compile(r"(\d+): ")     # srun --label: the task's rank before each line of a job over several nodes
STOPPED_BY = ("COMPLETED", "CANCELLED")   # a job that ended so was stopped, not failed (a watch says so)
DRAIN_TIMEOUT = 5.0     # a job that ended: how long its last lines may take to come through its follower


class JobRun(ServiceRun):
    """One service of the deployment that runs as a Slurm job."""

    cfg: JobService

    def __init__(self, cfg: ServiceConfig, judge: LineJudge) -> None:
        super().__init__(job_service(cfg), judge)
        self.job: JobRow | None = None           # the current attempt's job, as last looked at
        self.node = ""                           # where it runs (its first node), once it does
        self.nodes: tuple[tuple[str, tuple[int, ...]], ...] = ()   # every node it runs on (rank 0's first), its GPUs
        self.gpus: tuple[int, ...] = ()          # the GPU indices Slurm gave it there
        self.output: JobOutput | None = None    # its current job's output, followed by ``follower``
        self.follower: asyncio.Task | None = None
        self._told: JobStatus | None = None
        self._found: tuple[float, list[JobRow]] | None = None   # the last look at its name's jobs, and when
        self._queued_at = 0.0

    @property
    def cluster(self) -> ClusterSession:
        assert isinstance(self.session, ClusterSession), f"{self.name}: a job's run needs its cluster's session"
        return self.session

    @property
    def unit(self) -> str:
        """Its job's name: what a unit's name is to a unit's run (Slurm finds the job by it)."""
        name = job_of(self.cfg).name
        assert name is not None
        return name

    @property
    def running(self) -> bool:
        """Whether its job was queued or running when last looked at."""
        return self.job is not None and not self.job.ended

    def placed(self) -> tuple[str | None, str | None]:
        return (self.job.job_id if self.job else None), self.node or None

    @property
    def ranks_to_join(self) -> int:
        """A server over several nodes: its ranks >= 1 print into its one output, each line labelled (srun
        --label): it is ready once each said so."""
        return job_of(self.cfg).nodes - 1 if self.cfg.role in BACKEND_ROLES else 0

    def rank_words(self, rank: int) -> str:
        """A rank and its node (srun gives node i task i)."""
        return f"rank {rank}" + (f" on {self.nodes[rank][0]}" if rank < len(self.nodes) else "")

    def rank_of(self, message: str) -> tuple[int, str] | None:
        """srun --label's ``N: `` before each line: the task's rank, one task per node."""
        found = LABEL.match(message)
        return (int(found[1]), message[found.end():]) if found else None

    def names_for(self, router: ServiceConfig) -> frozenset[str]:
        """A router knows a job by its node's address (the URL it was given) or the node's name."""
        return frozenset({self.address, self.node} - {""})

    def url_for(self, router: ServiceConfig) -> str | None:
        """Its node's address, Slurm's pick (None until it is placed)."""
        if not self.node or not self.cfg.port:
            return None
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.cfg.port}"

    def info(self, deployment: Deployment) -> ServiceInfo:
        """The job as the faces draw it (its GPUs and node are Slurm's to give), and the commands that cancel it
        and submit it again."""
        cfg = self.cfg
        cluster = clusters_of(deployment)[cfg.host]
        cancel = shlex.join(SlurmCommands.for_cluster(cluster).cancel_named(self.unit))
        restart = f"{cancel}; sbatch {shlex.quote(script_path(cluster.output_dir, self.unit))}"
        return ServiceInfo(cfg.name, cfg.role, self.unit, cfg.host, (), None, cfg.port, tuple(cfg.after), cfg.timeout,
                           restart, cancel, job=True, engine=cfg.engine)

    async def close(self) -> None:
        """Stop following its job's output."""
        follower = self.follower
        self._stop_following()
        if follower is not None:
            await asyncio.gather(follower, return_exceptions=True)

    # -- looks ---------------------------------------------------------------------
    async def keep_looking(self) -> None:
        """Nothing to look at before its job is submitted (a unit's run looks at its unit meanwhile)."""
    async def look(self) -> list[JobRow]:
        """Every job of its name Slurm lists, oldest first (one squeue for the cluster's looks of the moment)."""
        rows = await self.cluster.jobs(self.unit)
        self._found = (self.w.clock(), rows)
        return rows

    async def _live(self) -> JobRow | None:
        """Its name's newest job still queued or running: from the preflight's look when that is this recent."""
        found = self._found
        recent = found is not None and self.w.clock() - found[0] < self.w.timing.unit_poll
        rows = found[1] if found is not None and recent else await self.look()
        live = [row for row in rows if not row.ended]
        return live[-1] if live else None

    async def _look_job(self) -> None:
        """The current job again; one squeue no longer lists is asked of scontrol, then of the accounting."""
        assert self.job is not None
        rows = await self.looks.answered(self.look())
        if rows is None:
            return                               # a login host out of reach or too slow tells nothing of the job
        job = self.job
        self.job = next((row for row in rows if row.job_id == job.job_id), None) or await self._forgotten(job)
        self._tell_job()

    async def _forgotten(self, job: JobRow) -> JobRow:
        """A job squeue no longer lists: what scontrol or sacct still say of it."""
        detail = await self.cluster.detail(job.job_id)
        if detail is not None:
            return JobRow(job.job_id, detail.state, detail.reason, detail.nodes, detail.start, job.name, detail.exit_code)
        accounted = [row for row in await self.cluster.accounted(job.name) or () if row.job_id == job.job_id]
        return accounted[-1] if accounted else JobRow(job.job_id, "UNKNOWN", "no longer known to Slurm", job.nodes,
                                                      job.start, job.name)

    async def _check_unit(self) -> None:
        """While waiting and after ready: a job that ended is the service's problem, in Slurm's words, once its
        last lines are in (a failure line among them tells more)."""
        await self._look_job()
        job = self.job
        if job is not None and job.ended and self.attempt.unit_problem is None:
            await self._drain()
            self.attempt.unit_problem = await self._ended_reason(job)

    async def _drain(self) -> None:
        """Let in the lines an ended job wrote last: until the follower has delivered as many as its file holds."""
        output = self.output
        if output is None:
            return
        result = await self.cluster.read(line_count(output.path))
        words = result.stdout.split() if result.ok else []
        if words and words[0].isdigit():
            await output.caught_up(int(words[0]), DRAIN_TIMEOUT)

    async def _ended_reason(self, job: JobRow) -> str:
        """How it ended in Slurm's words; its exit code from scontrol when squeue (which has none) listed it."""
        code = job.exit_code
        if not code:
            detail = await self.cluster.detail(job.job_id)
            code = detail.exit_code if detail is not None else ""
        return ended_words(job, code)

    def _tell_job(self) -> None:
        """Tell the job as Slurm reports it when that changed (its state, reason, node, GPUs)."""
        job = self.job
        if job is None:
            return
        status = JobStatus(self.name, job.job_id, job.state, job.reason, self.node, self.gpus, job.exit_code,
                           self.nodes if len(self.nodes) > 1 else (), self.w.elapsed())
        told = self._told
        if told is None or replace(told, elapsed=status.elapsed) != status:
            self._told = status
            self.w.emit(status)

    # -- a life: submit (or attach), queue, start, then as a unit's ------------------------
    async def bring_up(self, action: Action = Action.START) -> bool:
        """Attach to its job or submit one, wait for its place, then judge it as a unit's run judges its unit."""
        self._stop_following()
        # Lines come once the job runs; those that come before it is seen running are judged then.
        self.attempt = self.fresh_attempt(collecting=True)
        self.job, self.node, self.gpus, self.nodes, self.address = None, "", (), (), LOOPBACK_ADDRESS
        try:
            live = await self._live()
            if live is not None and action is not Action.RESTART:
                await self._attach_job(live, "already running: attached" if action is Action.START else "attached")
            elif action is Action.ATTACH:
                await self._judge_ended()
                return False
            else:
                await self._submit(live)
            if self.state is S.QUEUED:
                await self._until_running()
            if self.state is S.WAITING:
                assert self.attempt.started_at is not None
                await self.ready_wait.wait(self.attempt.started_at + self.cfg.timeout)
            if self.state is S.READY:
                await self.serving_watch.watch()
                return True
        except HostError as exc:
            self.lines.release_held()
            if self.state in (S.PENDING, S.QUEUED, *JUDGED_STATES):
                self.transition(S.FAILED, str(exc))
        return False

    async def _attach_job(self, job: JobRow, how: str) -> None:
        """Its job is queued or running already: judge it from its first line, as if pdtui had submitted it."""
        self.attempt.attached = True
        self.attempt.invocation = job.job_id
        self.job = job
        self._queued_at = self.w.clock()
        detail = await self.cluster.detail(job.job_id)
        path = detail.fields.get("StdOut", "") if detail is not None else ""
        self._follow(job.job_id, path if path and "%" not in path else
                     output_path(self.cluster.config.output_dir, self.unit, job.job_id))
        self._tell_job()
        if job.queued:
            self.transition(S.QUEUED, f"{how}: {self._pending()}")
            self.judged = True          # a watch has its verdict: queued, for Slurm's reason
            self.w.changed()
        else:
            await self._started(how)

    async def _submit(self, replacing: JobRow | None) -> None:
        """Submit the job (after cancelling the one it replaces); QUEUED once Slurm has it, WAITING if it runs."""
        script = render_script(self.w.deployment, self.cfg, self._backend_urls() if self.cfg.is_router else None)
        deadline = self.w.clock() + self.w.timing.stop_timeout
        after = f" (after scancel of job {replacing.job_id})" if replacing is not None else ""
        self.transition(S.STARTING, f"sbatch {script.path}{after}")
        if replacing is not None:
            problem = await self._cancel(deadline)
            if problem:
                self.transition(S.FAILED, problem)
                return
        job_id, error = await self.cluster.submit(script, deadline)
        if job_id is None:
            self.lines.release_held()
            self.transition(S.FAILED, f"sbatch failed: {error}")
            return
        self.started_by_us = True
        self.attempt.invocation = job_id
        self.job = JobRow(job_id, "PENDING", "", "", "", self.unit)
        self._queued_at = self.w.clock()
        self._follow(job_id, script.output(job_id))
        await self._look_job()
        if not await self._placed("submitted"):
            self.transition(S.QUEUED, f"submitted: {self._pending()}")

    def _pending(self) -> str:
        assert self.job is not None
        return f"job {self.job.job_id} pending" + (f" ({self.job.reason})" if self.job.reason else "")

    async def _until_running(self) -> None:
        """While its job waits for its place: WAITING once it runs, FAILED if it ends first, TIMED_OUT (naming
        Slurm's reason) if it still waits at the queue timeout. A job timed out so stays queued: down cancels it."""
        deadline = self._queued_at + self.cfg.queue_timeout
        while True:
            now = self.w.clock()
            await self.wake.sleep(min(deadline, self.looks.beat(now)) - now)
            await self._look_job()
            job = self.job
            assert job is not None
            if await self._placed("started"):
                return
            if self.w.clock() >= deadline:
                self.transition(S.TIMED_OUT, f"still pending after {format_duration(self.cfg.queue_timeout)}: "
                                             f"{job.reason or 'no reason given'} (job {job.job_id} is left in the queue)")
                return

    async def _placed(self, how: str) -> bool:
        """Whether the job left the queue: it runs, or it ran and ended already (its lines are judged as it
        was running), or it ended without ever running (FAILED in Slurm's words)."""
        job = self.job
        assert job is not None
        if job.running or (job.ended and job.nodes):
            await self._started(how)
            return True
        if job.ended:
            self.transition(S.FAILED, await self._ended_reason(job))
            return True
        return False

    async def _started(self, how: str) -> None:
        """It runs: its node and GPUs from scontrol, its start from Slurm's RunTime; judge its lines from now."""
        job = self.job
        assert job is not None
        detail = await self.cluster.detail(job.job_id)
        self.node = (detail.batch_host or first_host(detail.nodes)) if detail is not None else first_host(job.nodes)
        self.gpus = detail.gpu_indices if detail is not None else ()
        self.address = await self.cluster.address(self.node) if self.node else LOOPBACK_ADDRESS
        ran = parse_elapsed(detail.fields.get("RunTime", "")) if detail is not None else None
        self.attempt.started_at = self.w.clock() - (ran or 0.0)
        nodes = detail.nodes if detail is not None else job.nodes
        self.nodes = detail.node_gpus() if detail is not None else tuple((node, ()) for node in hostnames(nodes))
        self._tell_job()
        gpus = f", GPUs {gpu_ranges(self.gpus)}" if self.gpus else ""
        where = f"{nodes} (rank 0 on {self.node})" if self.ranks_to_join and nodes else self.node or "?"
        self.transition(S.WAITING, f"{how}: job {job.job_id} running on {where}{gpus}")
        self.lines.release_held()

    async def _judge_ended(self) -> None:
        """Watching a service whose job is not running: its last job's end says stopped or failed."""
        rows = self._found[1] if self._found is not None else await self.look()
        last = rows[-1] if rows else None
        if last is None:
            accounted = await self.cluster.accounted(self.unit)
            last = accounted[-1] if accounted else None
        self.lines.release_held()
        if last is None:
            self.transition(S.STOPPED, f"no job named {self.unit}")
            return
        self.job = last
        self._tell_job()
        reason = await self._ended_reason(last)
        self.transition(S.STOPPED if last.state in STOPPED_BY else S.FAILED, reason)

    def _backend_urls(self) -> dict[str, str]:
        """The URL of every backend job this router comes after: its node's address, Slurm's pick."""
        urls = {}
        for name in self.cfg.after:
            peer = self.w.peers[name]
            url = peer.url_for(self.cfg) if peer.cfg.placement is JOBS else None
            if url is not None:
                urls[name] = url
        return urls

    # -- its output ---------------------------------------------------------------------
    def _follow(self, job_id: str, path: str) -> None:
        self._stop_following()
        self.output = self.cluster.output(path, job_id, self.lines.take, self._output_problem)
        self.follower = asyncio.create_task(self.output.run(), name=f"output {self.name}")

    def _stop_following(self) -> None:
        if self.follower is not None:
            self.follower.cancel()
            self.follower = None

    def _output_problem(self, message: str) -> None:
        self.w.emit(Notice("warning", message, self.name, self.w.elapsed()))

    # -- down ------------------------------------------------------------------------
    async def stop(self, *, disable: bool = False, why: str = "") -> None:
        """Cancel its job and wait until Slurm says it ended: STOPPED, or FAILED naming what still runs.

        (A job has nothing to disable: ``disable`` changes nothing.)
        """
        deadline = self.w.clock() + self.w.timing.stop_timeout
        try:
            rows = await self.look()
            live = [row for row in rows if not row.ended]
            if not live:
                ended = f" (job {rows[-1].job_id} {rows[-1].state})" if rows else ""
                self._settle(S.STOPPED, f"no job of {self.unit} was running{ended}")
                return
            self.job = live[-1]
            self._tell_job()
            self.transition(S.STOPPING, shlex.join(self.cluster.slurm.cancel_named(self.unit)))
            problem = await self._cancel(deadline)
            if problem:
                self.transition(S.FAILED, problem)
                return
            self.transition(S.STOPPED, f"cancelled: job {self.job.job_id} {self.job.state}" + (f": {why}" if why else ""))
        except HostError as exc:
            self._settle(S.FAILED, str(exc))

    async def _cancel(self, deadline: float) -> str | None:
        """scancel its jobs and wait until none is queued or running; None then, else what is wrong."""
        result = await self.cluster.cancel(self.unit, deadline)
        if not result.ok:
            return f"scancel failed: {result.last_words}"
        while True:
            rows = await self.look()
            live = [row for row in rows if not row.ended]
            if self.job is not None:
                self.job = next((row for row in rows if row.job_id == self.job.job_id), self.job)
                self._tell_job()
            if not live:
                return None
            if self.w.clock() >= deadline:
                return f"job {live[-1].job_id} still {live[-1].state} after {self.w.timing.stop_timeout:g}s"
            await asyncio.sleep(self.w.timing.poll)
