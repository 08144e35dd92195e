"""Slurm in the config: a cluster (its login host and where jobs write) and a service's ``job:`` block.

A service on a cluster runs as a batch job whose script pdtui writes from the
service's ``job:`` block (the ``#SBATCH`` lines) and ``launch:`` block (the
command line its unit would run): see pdtui/targets/slurm/script.py. Every value that
becomes an ``#SBATCH`` line is one word: sbatch splits those lines itself.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict

from pdtui.config.defaults import DEFAULT_DIST_PORT
from pdtui.config.errors import fail, show
from pdtui.config.fields import (
    WORD_PATTERN,
    Bool,
    Check,
    Duration,
    Port,
    check_absolute_dir,
    check_text,
    integer,
    listed,
)

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
