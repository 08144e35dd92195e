"""sbatch, squeue, sacct, scontrol and scancel as pdtui runs them on a cluster's login host: argv builders.

Every command is an argv list (never a shell string but the one fixed script
that writes a job script and submits it); a cluster's ``commands:`` wrappers
(``env SLURM_CONF=... sbatch``, say) are applied here, in one place.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

from pdtui.targets.slurm.parse import SACCT_FIELDS, SQUEUE_FORMAT

# $1 the folder, $2 the script in base64, $3 its path; then the sbatch argv (the path last). POSIX sh, coreutils' base64.
_WRITE_AND_SUBMIT = ('set -e; mkdir -p "$1"; printf %s "$2" | base64 -d > "$3.tmp"; chmod 755 "$3.tmp"; '
                     'mv -f "$3.tmp" "$3"; shift 3; exec "$@"')
SACCT_SINCE = "now-7days"    # sacct lists only today's jobs unless told otherwise


@dataclass(frozen=True, slots=True)
class SlurmCommands:
    """How Slurm's clients are invoked on one cluster's login host."""

    sbatch: tuple[str, ...] = ("sbatch",)
    squeue: tuple[str, ...] = ("squeue",)
    sacct: tuple[str, ...] = ("sacct",)
    scontrol: tuple[str, ...] = ("scontrol",)
    scancel: tuple[str, ...] = ("scancel",)

    @classmethod
    def for_cluster(cls, cluster) -> SlurmCommands:
        """From a ClusterConfig (its ``commands`` mapping)."""
        commands = cluster.commands
        return cls(commands["sbatch"], commands["squeue"], commands["sacct"], commands["scontrol"], commands["scancel"])

    def submit(self, folder: str, path: str, script: str) -> list[str]:
        """Write ``script`` at ``path`` (in ``folder``, made if need be) and submit it; sbatch prints the job id."""
        encoded = base64.b64encode(script.encode()).decode()
        return ["sh", "-c", _WRITE_AND_SUBMIT, "sh", folder, encoded, path, *self.sbatch, "--parsable", path]

    def queue(self, names: Sequence[str]) -> list[str]:
        """The user's jobs of these names in every state Slurm still remembers (an ended one for a few minutes)."""
        return [*self.squeue, "--me", "--noheader", "--states=all", f"--name={','.join(names)}",
                f"--format={SQUEUE_FORMAT}"]

    def accounting(self, names: Sequence[str]) -> list[str]:
        """The user's jobs of these names in the accounting database, oldest first (an older end, too)."""
        return [*self.sacct, "--parsable2", "--noheader", "--allocations", f"--starttime={SACCT_SINCE}",
                f"--name={','.join(names)}", f"--format={','.join(SACCT_FIELDS)}"]

    def show_job(self, job_id: str) -> list[str]:
        """One job in detail: its nodes, and (``-d``) the GPU indices it was given on each."""
        return [*self.scontrol, "show", "job", "-d", job_id]

    def show_node(self, node: str) -> list[str]:
        return [*self.scontrol, "show", "node", node]

    def cancel_named(self, name: str) -> list[str]:
        """Cancel every job of this name (the user's): the service's job, and any twin of it."""
        return [*self.scancel, "--me", f"--name={name}"]


FOLLOW_POLL = 0.2    # seconds between tail's looks at a file it cannot watch (a shared filesystem, no inotify)


def follow(path: str, from_line: int = 1) -> list[str]:
    """A job's output file from a line on (its first by default), followed as it grows (and before it exists:
    a pending job's)."""
    return ["tail", "-F", f"--sleep-interval={FOLLOW_POLL:g}", "-n", f"+{from_line}", path]


def line_count(path: str) -> list[str]:
    """How many lines a job's output file has now (the follower has delivered them all when it has as many)."""
    return ["wc", "-l", path]
