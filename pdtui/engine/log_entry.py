"""One line of a service's output, from wherever the service runs: the engine's line type.

A target reads its own source into these (systemd's journal: targets/systemd/journal_json.py; a Slurm job's
output file: targets/slurm/job_output.py); the engine judges and shows them without knowing which.
"""

from __future__ import annotations

from dataclasses import dataclass

# A follower hands a burst to the engine this many entries at a time, the event loop running between (about
# 2 ms of the engine's work each).
YIELD_EVERY = 200


@dataclass(slots=True)      # not frozen: one is made per log line, and frozen costs 5x to build
class LogEntry:
    cursor: str | None              # its place in its source: a line read twice (history and tail) is seen once
    realtime: float | None          # when it was written, seconds since the epoch
    source: str | None              # what wrote it, as its target names it (a unit); None where one thing writes
    invocation: str | None          # which run of the service wrote it (a unit's invocation, a job's id)
    priority: int | None            # syslog's 0 (emergency) to 7 (debug), where the source has one
    message: str
    system: bool = False            # written by the target itself about the service (systemd's own lines)
