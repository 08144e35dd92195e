"""Slurm's settings of the config: the section ``clusters:`` (each a login host and where its jobs write) and a
service's ``cluster:`` and ``job:`` block, with their validation: a kind of place (pdtui/config/placement.py), which
pdtui/targets/__init__.py registers.

A service on a cluster runs as a batch job whose script pdtui writes from the
service's ``job:`` block (the ``#SBATCH`` lines) and ``launch:`` block (the
command line its unit would run): see pdtui/targets/slurm/script.py. Every value that
becomes an ``#SBATCH`` line is one word: sbatch splits those lines itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from pdtui.config.defaults import DEFAULT_DIST_PORT
from pdtui.config.errors import fail, show
from pdtui.config.fields import (
    WORD_PATTERN,
    Bool,
    Check,
    Duration,
    HostName,
    Port,
    check_absolute_dir,
    check_text,
    integer,
    listed,
)
from pdtui.config.placement import PlacementKind
from pdtui.config.places import Reached, commands_check, each_itself
from pdtui.config.schema import Claim, Deployment, ServiceConfig

SLURM_COMMANDS: tuple[str, ...] = ("sbatch", "squeue", "sacct", "scontrol", "scancel")
_MEMORY = re.compile(r"\d+[KMGT]?")
_MEMORY_EXPECTED = "memory per node as sbatch takes it (a number of MB, or with K, M, G or T: 200G; 0 for all of it)"


def check_word(value: Any, expected: str) -> str:
    """One word of an ``#SBATCH`` line: printable, no spaces, not an option."""
    text = check_text(value, expected)
    if text.startswith("-") or any(ch.isspace() for ch in text):
        raise fail(f"expected {expected} (one word, not starting with '-'), got {show(value)}")
    return text


def slurm_word(expected: str) -> Check:
    """One word of an ``#SBATCH`` line, with what it accepts (see :class:`~pdtui.config.fields.Check`)."""
    return Check(lambda v: check_word(v, expected),
                 accepts={"type": "string", "pattern": WORD_PATTERN, "description": expected})


def _memory(value: Any) -> str:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not _MEMORY.fullmatch(text):
        raise fail(f"expected {_MEMORY_EXPECTED}, got {show(value)}")
    return text


def _option(value: Any) -> str:
    """An extra sbatch option: ``--mail-type=FAIL``, ``--nodelist=gpu[01-02]``."""
    text = check_text(value, "an sbatch option")
    if not text.startswith("-"):
        raise fail(f"expected an sbatch option starting with '-' (like --exclusive or --qos=high), got {show(value)}")
    return text


def _line(value: Any) -> str:
    """A shell line run before the command (``module load cuda``, ``source venv/bin/activate``)."""
    if not isinstance(value, str) or not value.strip() or not value.isprintable():
        raise fail(f"expected a shell line (one line of text), got {show(value)}")
    return value


MEMORY = Check(_memory, accepts={"anyOf": [{"type": "integer", "minimum": 0},
                                            {"type": "string", "pattern": f"^{_MEMORY.pattern}$"}],
                                  "description": _MEMORY_EXPECTED})
SETUP_LINE = Check(_line, accepts={"type": "string", "pattern": r"\S", "description": "a shell line"})
OPTION = Check(_option, accepts={"type": "string", "pattern": "^-", "description": "an sbatch option"})


class JobSpec(BaseModel):
    """How a service's job asks Slurm for its place; every key optional (a backend names its GPUs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    EXPECTED: ClassVar[str] = "a mapping of job settings (partition, gpus_per_node, time, ...)"

    name: Annotated[str, slurm_word("a job name")] | None = None          # filled by the deployment: DEPLOYMENT-SERVICE
    partition: Annotated[str, slurm_word("a partition name")] | None = None
    account: Annotated[str, slurm_word("an account name")] | None = None
    qos: Annotated[str, slurm_word("a QOS name")] | None = None
    reservation: Annotated[str, slurm_word("a reservation name")] | None = None
    constraint: Annotated[str, slurm_word("a node feature constraint (like h100&ib)")] | None = None
    nodes: Annotated[int, integer("a number of nodes (an integer >= 1)", 1)] = 1
    gpus_per_node: Annotated[int, integer("a number of GPUs per node (an integer >= 0)", 0)] | None = None
    gpu_type: Annotated[str, slurm_word("a GPU type as the cluster's gres names it (like h100)")] | None = None
    cpus_per_task: Annotated[int, integer("a number of CPUs (an integer >= 1)", 1)] | None = None
    mem: Annotated[str, MEMORY] | None = None
    time: Duration | None = None     # the job's time limit
    exclusive: Bool = False
    queue_timeout: Duration | None = None   # default: the service's timeout
    dist_port: Port = DEFAULT_DIST_PORT   # a multi-node server's --dist-init-addr port, on its first node
    setup: Annotated[tuple[str, ...], listed(SETUP_LINE, "a list of shell lines run before the command")] = ()
    args: Annotated[tuple[str, ...], listed(OPTION, "a list of extra sbatch options")] = ()


def check_job(name: str, role: str, job: JobSpec) -> None:
    """What a job of this role needs: an SGLang server asks for GPUs; a router is one process on one node."""
    if role in ("prefill", "decode") and not job.gpus_per_node:
        raise fail(f"the job of service '{name}' needs gpus_per_node (how many GPUs Slurm gives its {role} on each "
                   f"node)", "job", on="key")
    if role == "router" and job.nodes != 1:
        raise fail(f"service '{name}' is a router: its job runs on one node, got nodes: {job.nodes}", "job", "nodes")
    if job.gpu_type is not None and not job.gpus_per_node:
        raise fail(f"the job of service '{name}' names a gpu_type but asks for no GPUs (gpus_per_node)",
                   "job", "gpu_type", on="key")


def check_output_dir(value: Any) -> str:
    """A cluster's job folder: an absolute path without ``%`` or ``\\``, which sbatch would read in ``--output`` as
    its filename pattern (a replacement symbol; a backslash turns them all off), so the output would be written
    elsewhere than where pdtui follows it. Blanks and ``#`` are fine: the directive quotes the path."""
    text = check_absolute_dir(value)
    if "%" in text or "\\" in text:
        raise fail(f"expected a folder without '%' or '\\' (sbatch reads them in --output as its filename pattern), "
                   f"got {show(value)}")
    return text


OutputDir = Annotated[str, Check(check_output_dir, accepts={
    "type": "string", "pattern": r"^/[^%\\]*$", "description": "an absolute path of a folder the nodes share"})]


class ClusterConfig(Reached):
    """A Slurm cluster, reached through its login host (over SSH, or ``local``: this machine is one).

    Jobs write their script and output under ``output_dir``, a folder the nodes
    and the login host share: pdtui follows a job's output there.
    """

    KIND: ClassVar[str] = "cluster"
    EXPECTED: ClassVar[str] = "a mapping of cluster settings (address or local, output_dir, ...)"

    output_dir: OutputDir
    partition: Annotated[str, slurm_word("a partition name")] | None = None
    account: Annotated[str, slurm_word("an account name")] | None = None
    commands: Annotated[dict[str, tuple[str, ...]], commands_check(SLURM_COMMANDS)] = Field(
        default_factory=lambda: each_itself(SLURM_COMMANDS))


class JobService(ServiceConfig):
    """A service as a Slurm job on a cluster: its commands run on the cluster's login host, under the cluster's
    name (its ``host``), and Slurm picks its node when it starts."""

    cluster: HostName | None = None   # its cluster
    job: JobSpec | None = None        # how its job asks Slurm for its place (a job is found by its job's name)

    @property
    def is_job(self) -> bool:
        """Whether it runs as a Slurm job (on ``cluster``)."""
        return self.cluster is not None

    @property
    def gpu_count(self) -> int:
        """A job's GPUs: those its job asks for on all of its nodes."""
        if self.job is not None:
            return (self.job.gpus_per_node or 0) * self.job.nodes
        return super().gpu_count

    @property
    def queue_timeout(self) -> float:
        """How long its job may wait in Slurm's queue (its ``timeout`` then counts from the job's start)."""
        return self.job.queue_timeout if self.job is not None and self.job.queue_timeout else self.timeout

    @model_validator(mode="after")
    def _jobs_consistent(self) -> Self:
        """A job: Slurm places it (no GPUs or NUMA node of its own) and runs its launch block."""
        if self.cluster is None or self.job is None:
            return self
        for key in _PLACED_BY_SLURM:
            if getattr(self, key, None) not in (None, ()):
                raise _placed_by_slurm(self, key)
        if self.launch is None:
            raise fail(f"{_job_words(self)}: it needs a launch block (its job script runs that command line)", on="key")
        check_job(self.name, self.role, self.job)
        return self


_PLACED_BY_SLURM = ("gpus", "numa", "replaces")
"""What a service on a host says of its place, and Slurm decides for a job."""


def _job_words(svc: ServiceConfig) -> str:
    return f"service '{svc.name}' is a job on cluster '{svc.host}'"


def _placed_by_slurm(svc: ServiceConfig, key: str) -> PydanticCustomError:
    return fail(f"{_job_words(svc)}: Slurm places it, so it has no {key} of its own (ask with job: gpus_per_node, "
                f"gpu_type, constraint)", key, on="key")


def job_name(deployment: str, service: str) -> str:
    """A job's default name: the deployment's and the service's, in the characters a job name keeps well."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", deployment).strip("-.") or "pdtui"
    return f"{stem}-{service}"


class Jobs(PlacementKind):
    """Services as Slurm jobs on clusters."""

    def fill(self, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**super().fill(entry), "job": entry.get("job", {})}

    def prepare(self, deployment: Any, name: str, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        """Its job named as its deployment and service, unless its job block names it."""
        job = entry.get("job", {})
        if isinstance(job, Mapping) and "name" not in job:
            return {**entry, "job": {**job, "name": job_name(str(deployment or ""), name)}}
        return entry

    def where(self, svc: ServiceConfig) -> str:
        return f"cluster '{svc.host}' (its jobs may share a node)"

    def conflict(self, name: str, key: str, theirs: str, other: PlacementKind) -> PydanticCustomError:
        if theirs == "hosts":
            return fail(f"service '{name}' has {key} and {theirs}, expected one of them (a job's nodes are job: "
                        "nodes: N)", theirs, on="key")
        return super().conflict(name, key, theirs, other)

    def refuse(self, svc: ServiceConfig, key: str) -> PydanticCustomError | None:
        if key in _PLACED_BY_SLURM:
            return _placed_by_slurm(svc, key)
        return fail(f"{_job_words(svc)}: it has no {key} (its job is found by its name, job: name)", key, on="key")

    def stray(self, svc: ServiceConfig, key: str, placed: PlacementKind) -> PydanticCustomError | None:
        return fail(f"service '{svc.name}' has a job block but runs on {placed.what} '{svc.host}': a job runs on a "
                    f"cluster (cluster: NAME instead of {placed.keys[0]}: NAME)", key, on="key")

    def claims(self, svc: ServiceConfig) -> tuple[Claim, ...]:
        """A job's name, on its cluster."""
        job = svc.settings(JobService).job
        assert job is not None and job.name is not None
        return (Claim(f"job {job.name}", f"job name {job.name} on cluster '{svc.host}'",
                      ("services", svc.name, "job", "name")),)

    def check_deployment(self, deployment: Deployment) -> None:
        """A router placed elsewhere names its backends' URLs before it starts: a backend that is a job has none
        until Slurm places it."""
        for name, svc in deployment.services.items():
            jobs = [dep for dep in svc.after if deployment.services[dep].placement is self]
            if svc.is_router and svc.placement is not self and jobs:
                raise fail(f"router '{name}' is a unit on host '{svc.host}' but '{jobs[0]}' is a job on a node Slurm "
                           f"picks: its unit cannot name that URL; run the router as a job too (cluster: "
                           f"{deployment.services[jobs[0]].host})", "services", name, "host")


JOBS = Jobs("clusters", ClusterConfig, JobService, ("cluster",), "a job on a cluster", needed_for="for Slurm jobs",
            scheduled=True)


def clusters_of(deployment: Deployment) -> dict[str, ClusterConfig]:
    """The deployment's clusters (its ``clusters:``)."""
    return deployment.places(ClusterConfig)


def job_service(cfg: ServiceConfig) -> JobService:
    """A service as Slurm reads it: its cluster and its job block."""
    return cfg.settings(JobService)
