"""A Python traceback in a server's log: the exception that ends it is the cause of a crash.

SGLang's most common fatal line, ``Scheduler hit an exception: Traceback (most
recent call last):``, says only *that* a process died; the exception on the
traceback's last line (``RuntimeError: Mooncake memory registration
failed.``), 20-60 lines later, says *why*. Every rank prints its own
traceback and they interleave; a chained exception starts a new traceback
whose exception is the one to quote. Pure: fed one line at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADER = "Traceback (most recent call last)"
# An exception's own line: its (dotted) class name, then its message or nothing; frames are indented.
_EXCEPTION = re.compile(r"^(?:\[[^\]]*\] )?(?P<text>(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Exit|Interrupt)"
                        r"(?:: .*|:)?)$")
# The ranks in SGLang's prefix: [2026-06-09 11:38:45 TP5], [... DP3 TP3 EP3], [... PP1 TP0].
_RANKS = re.compile(r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)? (?P<ranks>(?:[A-Z_]*[A-Z]\d+ ?)+)\]")
# A server's own prefix: SGLang's, ranks or not ([2026-06-09 11:38:45], [2026-06-09 11:38:45 TP0]); vLLM's, its
# process, level, time and source line ((Worker pid=2424) ERROR 12-06 07:32:52 [base_worker.py:1354]).
_STAMP = re.compile(r"^(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z_\d ]*)?\] ?"
                    r"|\(\w+ pid=\d+\) [A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] )")


def without_stamp(line: str) -> str:
    """``line`` without its server's time prefix (its journal entry has its own time): SGLang's time and ranks,
    vLLM's process, level, time and source line."""
    return _STAMP.sub("", line, count=1)


# SGLang's per-request transfer error: "... with exception KVTransferError(bootstrap_room=R): why".
_TRANSFER = re.compile(r"with exception (?P<kind>\w+)\(bootstrap_room=\d+\): (?P<why>.*)$")


def transfer_exception(line: str) -> str:
    """What a per-request KV transfer error says went wrong (``KVTransferError: why``), else the whole line: the
    request's ids before it say nothing a reader needs."""
    found = _TRANSFER.search(line)
    return f"{found['kind']}: {found['why']}" if found else line


def exception_of(line: str) -> str | None:
    """The exception ``line`` states (``RuntimeError: ...``, without a log prefix); None for any other line."""
    found = _EXCEPTION.match(line)
    return found.group("text") if found else None


def ranks_of(line: str) -> str | None:
    """The ranks SGLang's prefix names (``TP5``, ``DP3 TP3 EP3``); None without them."""
    found = _RANKS.search(line)
    return found.group("ranks").strip() if found else None


@dataclass(slots=True)
class TracebackWatch:
    """The tracebacks of one invocation, line by line: the exception of the latest one, once it has come."""

    open: bool = False                  # a traceback began and its exception has not come yet
    cause: str | None = None            # the exception that ended the latest traceback
    cause_at: float | None = None       # when it came (the run's clock)

    def feed(self, line: str, now: float) -> bool:
        """Take one line; True when it is the exception that ends the traceback under way."""
        if HEADER in line:
            self.open, self.cause = True, None
            return False
        if self.open and (text := exception_of(line)) is not None:
            self.open, self.cause, self.cause_at = False, text, now
            return True
        return False

    def recent_cause(self, now: float, within: float) -> str | None:
        """The latest traceback's exception when it came less than ``within`` seconds ago: a request's
        traceback long before a unit died is not why it died."""
        if self.cause is None or self.cause_at is None or now - self.cause_at > within:
            return None
        return self.cause
