"""sbatch, squeue, sacct, scontrol and scancel as pdtui runs them on a cluster's login host: argv builders.

Every command is an argv list (never a shell string but the one fixed script
that writes a job script and submits it); a cluster's ``commands:`` wrappers
(``env SLURM_CONF=... sbatch``, say) are applied here, in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from pdtui.targets.slurm.parse import SACCT_FIELDS, SQUEUE_FORMAT

EVERYONE_WRITES = ("$1 can be written by every user: another could make a job's output file before the job and read "
                   "or forge it; give output_dir a folder only you (or your group) can write")
# $1 the folder, $2 the script's file name in it; then the sbatch argv (the path last); the script itself on stdin
# (never a word of an argv: ps shows those to every user). In a folder others may write: the script is made by
# mktemp (a new file of a random name, 0600, never through a link planted there), then renamed over its name (a
# link planted at the name is replaced, never followed; -T: nor is a folder there moved into). POSIX sh, coreutils.
# A folder every user may write is refused: the job's output file has a name known in advance (NAME-JOBID.out, job
# ids count up), so another user could make it first, his own, and read the server's output (its --api-key among
# it) or write lines pdtui would judge (a ready line). A group's shared folder (g+w) is the group's choice.
_WRITE_AND_SUBMIT = ('set -e; umask 077; mkdir -p "$1"; '
                     'if [ -n "$(find -H "$1" -maxdepth 0 -perm -002)" ]; then '
                     f'echo "pdtui: {EVERYONE_WRITES}" >&2; exit 77; fi; '
                     'tmp=$(mktemp "$1/.$2.XXXXXX"); trap \'rm -f "$tmp"\' EXIT; '
                     'cat > "$tmp"; chmod 700 "$tmp"; mv -fT "$tmp" "$1/$2"; trap - EXIT; shift 2; exec "$@"')
SACCT_SINCE = "now-7days"    # sacct lists only today's jobs unless told otherwise


@dataclass(frozen=True, slots=True)
class Submission:
    """A job script's submission: the command, and the script it reads on its stdin."""

    argv: list[str]
    input: bytes


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

    def submit(self, folder: str, path: str, script: str) -> Submission:
        """Write ``script`` at ``path`` (in ``folder``, made if need be; 0700, as it may hold secrets) and submit it;
        sbatch prints the job id. The script goes on the command's stdin."""
        name = PurePosixPath(path).name
        assert f"{folder}/{name}" == path, f"{path} is not in {folder}"
        return Submission(["sh", "-c", _WRITE_AND_SUBMIT, "sh", folder, name, *self.sbatch, "--parsable", path],
                          script.encode())

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
