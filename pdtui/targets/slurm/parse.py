"""What Slurm's clients print, read: sbatch --parsable, squeue and sacct in chosen formats, scontrol show.

Pure functions; every one is tolerant of what it does not know (a field more,
a state a later Slurm adds), since the cluster's Slurm is not pdtui's to pick.
Text from the cluster is data: it is never interpreted, only split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Job states (squeue's %T, sacct's State, scontrol's JobState), by what they mean for a service.
QUEUED = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING",
                    "SUSPENDED", "STOPPED", "RESIZING"})
RUNNING = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT"})
ENDED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                   "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})

# squeue's fields, "|" between them; the job's name last (a name may hold "|": it takes the rest).
SQUEUE_FORMAT = "%i|%T|%r|%N|%S|%j"
SACCT_FIELDS = ("JobIDRaw", "State", "ExitCode", "Reason", "NodeList", "Start", "JobName")
NOT_SET = ("", "None", "(null)", "N/A", "Unknown", "None assigned")


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job as squeue or sacct lists it."""

    job_id: str
    state: str              # PENDING, RUNNING, FAILED, ... ("CANCELLED by 0" is CANCELLED)
    reason: str             # Slurm's reason: Resources, Priority, NonZeroExitCode, ...; "" when it gives none
    nodes: str              # the node list (a hostlist expression), "" while pending
    start: str              # the start time as Slurm prints it, "" when unknown
    name: str
    exit_code: str = ""     # sacct's ExitCode, "1:0" (status:signal)

    @property
    def queued(self) -> bool:
        return self.state in QUEUED

    @property
    def running(self) -> bool:
        return self.state in RUNNING

    @property
    def ended(self) -> bool:
        """Over for good: every state that is neither queued nor running (an unknown one too)."""
        return not self.queued and not self.running


def parse_submitted(stdout: str) -> str | None:
    """The job id ``sbatch --parsable`` printed (``12`` or ``12;cluster``), or None."""
    words = stdout.strip().splitlines()
    first = words[-1].split(";")[0].strip() if words else ""
    return first if first.isdigit() else None


def _state(text: str) -> str:
    """``CANCELLED by 1000`` -> ``CANCELLED``; ``COMPLETED+`` (sacct marks requeues) -> ``COMPLETED``."""
    words = text.split()
    return words[0].rstrip("+").upper() if words else ""


def _value(text: str) -> str:
    text = text.strip()
    return "" if text in NOT_SET else text


def parse_squeue(text: str) -> list[JobRow]:
    """``squeue --noheader --format=SQUEUE_FORMAT`` lines, in order; lines of another shape are skipped."""
    rows = []
    for line in text.splitlines():
        cells = line.split("|", 5)
        if len(cells) != 6 or not cells[0].strip():
            continue
        job_id, state, reason, nodes, start, name = cells
        rows.append(JobRow(job_id.strip(), _state(state), _reason(reason), _value(nodes), _value(start), name))
    return rows


def _reason(text: str) -> str:
    """squeue's %r wraps some reasons in parentheses (``(ReqNodeNotAvail, UnavailableNodes:n1)``)."""
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    return _value(text)


def parse_sacct(text: str) -> list[JobRow]:
    """``sacct --parsable2 --noheader --allocations --format=SACCT_FIELDS`` lines, in order."""
    rows = []
    for line in text.splitlines():
        cells = line.split("|", len(SACCT_FIELDS) - 1)
        if len(cells) != len(SACCT_FIELDS) or not cells[0].strip() or "." in cells[0]:   # "12.batch": a step
            continue
        job_id, state, exit_code, reason, nodes, start, name = cells
        rows.append(JobRow(job_id.strip(), _state(state), _reason(reason), _value(nodes), _value(start), name,
                           exit_code.strip()))
    return rows


ACCOUNTING_DISABLED = "accounting storage is disabled"


def accounting_off(stderr: str) -> bool:
    """Whether sacct said the cluster keeps no accounting (no slurmdbd): only squeue and scontrol can tell."""
    return ACCOUNTING_DISABLED in stderr.lower()


# ``Key=value`` pairs of scontrol's show output: a key starts a word; its value runs to the next key.
_PAIR = re.compile(r"(?:(?<=\s)|^)([A-Za-z][A-Za-z0-9_/:]*)=")


def key_values(line: str) -> list[tuple[str, str]]:
    """The ``Key=value`` pairs of one line of ``scontrol show`` (values may hold ``=``: ``TRES=cpu=1,node=1``)."""
    found = list(_PAIR.finditer(line))
    return [(match[1], line[match.end():found[i + 1].start() if i + 1 < len(found) else len(line)].strip())
            for i, match in enumerate(found)]


@dataclass(frozen=True, slots=True)
class JobDetail:
    """One job as ``scontrol show job -d`` tells it: where it runs and on which GPUs."""

    job_id: str
    name: str
    state: str
    reason: str
    exit_code: str                  # "1:0"
    nodes: str                      # NodeList (a hostlist expression)
    batch_host: str                 # where its script runs: the node a server listens on
    start: str
    gpus: dict[str, tuple[int, ...]] = field(default_factory=dict)   # node expression -> the GPU indices Slurm gave
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """The GPU indices of its first node (a multi-node job gets the same on each, as a rule)."""
        return next(iter(self.gpus.values()), ())

    def node_gpus(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Each of its nodes, in its NodeList's order (its ranks' under ``srun``), with the GPUs Slurm gave it."""
        given = {host: gpus for nodes, gpus in self.gpus.items() for host in hostnames(nodes)}
        return tuple((host, given.get(host, ())) for host in hostnames(self.nodes))


def parse_job(text: str) -> JobDetail | None:
    """``scontrol show job -d JOBID``; None when it names no job (``Invalid job id specified``)."""
    fields: dict[str, str] = {}
    gpus: dict[str, tuple[int, ...]] = {}
    for line in text.splitlines():
        pairs = key_values(line)
        if pairs and pairs[0][0] == "Nodes":         # -d: one line per set of nodes with the same allocation
            detail = dict(pairs)
            gpus[detail["Nodes"]] = gres_indices(detail.get("GRES", ""))
            continue
        for key, value in pairs:
            fields.setdefault(key, value)
    if not fields.get("JobId"):
        return None
    return JobDetail(fields["JobId"], fields.get("JobName", ""), _state(fields.get("JobState", "")),
                     _value(fields.get("Reason", "")), fields.get("ExitCode", ""), _value(fields.get("NodeList", "")),
                     _value(fields.get("BatchHost", "")), _value(fields.get("StartTime", "")), gpus, fields)


_GRES = re.compile(r"gpu(?::[^:(,\s]+)?:\d+\(IDX:([^)]*)\)")


def gres_indices(text: str) -> tuple[int, ...]:
    """The GPU indices of a GRES allocation: ``gpu:4(IDX:0-3)``, ``gpu:a100:2(IDX:0,2)`` -> (0, 1, 2, 3), (0, 2)."""
    indices: list[int] = []
    for match in _GRES.finditer(text):
        indices += index_list(match[1])
    return tuple(indices)


def index_list(text: str) -> list[int]:
    """``0-3,6`` -> [0, 1, 2, 3, 6]; anything that is not such a list (``N/A``) -> []."""
    found: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            return []
        found += range(int(low), int(high) + 1) if dash else [int(low)]
    return found


def parse_node(text: str) -> dict[str, str]:
    """``scontrol show node NAME``: its fields (``NodeAddr``, ``NodeHostName``, ``State``, ...)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        for key, value in key_values(line):
            fields.setdefault(key, value)
    return fields


_HOSTLIST = re.compile(r"([^\[,]+)(?:\[([^\]]+)\])?([^,\[]*)")


def first_host(hostlist: str) -> str:
    """The first node of a hostlist expression: ``gpu[03-05,07]`` -> ``gpu03``, ``a,b`` -> ``a``."""
    match = _HOSTLIST.match(hostlist.strip())
    if match is None:
        return ""
    prefix, ranges, suffix = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return f"{prefix}{first}{suffix}"


def hostnames(hostlist: str) -> list[str]:
    """Every node of a hostlist expression, in order: ``gpu[03-05,07],login`` -> gpu03 gpu04 gpu05 gpu07 login (as
    ``scontrol show hostnames``)."""
    names = []
    for match in _HOSTLIST.finditer(hostlist.strip()):
        prefix, ranges, suffix = match.groups()
        prefix = prefix.lstrip(",")
        if not prefix and not ranges:
            continue
        if not ranges:
            names.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not high:
                names.append(f"{prefix}{low}{suffix}")
                continue
            names += [f"{prefix}{n:0{len(low)}d}{suffix}" for n in range(int(low), int(high) + 1)]
    return names


def parse_elapsed(text: str) -> float | None:
    """A duration as Slurm prints it (``RunTime=``): ``MM:SS``, ``HH:MM:SS``, ``D-HH:MM:SS``; None otherwise."""
    days, dash, clock = text.strip().rpartition("-") if "-" in text else ("0", "", text.strip())
    parts = clock.split(":")
    if not days.isdigit() or not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return float(int(days) * 86400 + seconds)


def exit_words(code: str) -> str:
    """ExitCode ``STATUS:SIGNAL`` in words: ``exit code 1``, ``killed by signal 9``; "" for a clean or unknown one."""
    status, _, signal = code.partition(":")
    if signal.isdigit() and int(signal):
        return f"killed by signal {int(signal)}"
    if status.isdigit() and int(status):
        return f"exit code {int(status)}"
    return ""


def ended_words(job: JobRow, exit_code: str = "") -> str:
    """``job 12 OUT_OF_MEMORY (OutOfMemory), exit code 1``: its state, Slurm's reason and how it exited."""
    words = exit_words(exit_code or job.exit_code)
    return f"job {job.job_id} {job.state}" + (f" ({job.reason})" if job.reason else "") + (f", {words}" if words else "")
