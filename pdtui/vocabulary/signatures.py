"""What a kind of log line is to the judge: a pattern, what it means, how telling it is, and what it does.

The types only: each serving engine's own wording lives in its package
(pdtui/servers/sglang/signatures.py), and the engine's judge (engine/readiness.py) reads them. Here, below
both, so that the serving engines write them without importing the engine that reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class Severity(str, Enum):
    FATAL = "fatal"
    WARNING = "warning"
    TRANSFER = "transfer"
    EVIDENCE = "evidence"
    HANG = "hang"           # the server says it is stuck: a warning that names the phase it is in


class Searched(Protocol):
    """A pattern as the judge uses it: ``re``'s own (the engines' signatures), or a config's, searched with a bound
    on time (config/regex.py's ``Bounded``)."""

    @property
    def pattern(self) -> str: ...

    @property
    def flags(self) -> int: ...

    def search(self, string: str, /) -> object | None: ...


@dataclass(frozen=True, slots=True)
class Signature:
    """A kind of log line: its pattern, what it means, and how telling it is.

    When several fatal lines arrive together (a traceback, then the error it
    ends in), the most telling one (highest rank) names the failure. ``hint``
    is a literal that every matching line holds, for patterns that are more
    than literal text: the prefilter looks for it instead of running the regex
    on every line.
    """

    pattern: Searched
    reason: str
    rank: int
    severity: Severity = Severity.FATAL
    generations: str = "all"
    hint: str | None = None
    check: str | None = None        # the check an evidence line proves
    advice: str | None = None       # what to check next, where the software itself or its documentation says it


def signature(pattern: str, reason: str, rank: int = 5, severity: Severity = Severity.FATAL, generations: str = "all",
              hint: str | None = None, check: str | None = None, advice: str | None = None) -> Signature:
    return Signature(re.compile(pattern), reason, rank, severity, generations, hint, check, advice)
