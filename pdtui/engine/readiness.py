"""What makes a service ready, and what makes it failed, judged line by line.

Pure logic, no I/O: the orchestrator feeds journal lines of a unit's current
invocation to a :class:`LineJudge` and runs the HTTP/TCP checks itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pdtui.engine.events import LineKind


@dataclass(frozen=True, slots=True)
class Signature:
    """A failure line: its pattern, what it means, and how telling it is.

    When several failure lines arrive together (a traceback, then the error it
    ends in), the most telling one (highest rank) names the failure.
    """

    pattern: re.Pattern[str]
    reason: str
    rank: int


def _sig(pattern: str, reason: str, rank: int) -> Signature:
    return Signature(re.compile(pattern), reason, rank)


SGLANG_FAILURES: tuple[Signature, ...] = (
    _sig(r"warm Up Failed", "PD warm-up failed", 9),
    _sig(r"CUDA out of memory|OutOfMemoryError", "CUDA out of memory", 9),
    _sig(r"Not enough memory", "not enough GPU memory", 9),
    _sig(r"NCCL error", "NCCL error", 9),
    _sig(r"address already in use", "port already in use", 9),
    _sig(r"Decode handshake failed|KVTransferError", "KV transfer handshake failed", 8),
    _sig(r"Health check failed", "health check failed", 7),
    _sig(r"Initialization failed", "initialization failed", 5),
    _sig(r"Scheduler hit an exception", "scheduler crashed", 4),
    _sig(r"Received sigquit from a child", "a server process died", 3),
    _sig(r"Traceback \(most recent call last\)", "Python traceback", 1),
)

ROUTER_FAILURES: tuple[Signature, ...] = (
    _sig(r"address already in use|Address already in use", "port already in use", 9),
    _sig(r"panicked at", "router panicked", 8),
)

ROLE_FAILURES: dict[str, tuple[Signature, ...]] = {
    "prefill": SGLANG_FAILURES,
    "decode": SGLANG_FAILURES,
    "router": ROUTER_FAILURES,
    "other": (),
}

USER_RANK = 10   # a failure pattern the user wrote is the most telling of all

_WARN = re.compile(r"\bWARN(?:ING)?\b")
_WARN_HINT = re.compile("WARN")    # every warning line holds it: enough for the prefilter


_LITERAL = re.compile(r"(?:[^\\.^$*+?{}\[\]()|]|\\[^A-Za-z0-9])+")


def _literals(pattern: str) -> list[str] | None:
    """The literal texts a pattern is an alternation of (``a|b\\(c\\)``), or None if it is more than that."""
    parts = pattern.split("|")
    if not all(_LITERAL.fullmatch(part) for part in parts):
        return None
    return [re.sub(r"\\(.)", r"\1", part) for part in parts]


class Prefilter:
    """Whether a line may match any of some patterns: one search for the literal ones, regex for the rest.

    Most signatures are plain text. Their alternation, escaped and compiled once,
    lets the regex engine skip along by first characters: 1 µs per ordinary line,
    where the signatures' own patterns (groups, ``\b``) take several.
    """

    def __init__(self, patterns: list[re.Pattern[str]]) -> None:
        self.literals: list[str] = []
        self.regexes: list[re.Pattern[str]] = []
        for pattern in patterns:
            found = _literals(pattern.pattern) if not pattern.flags & re.IGNORECASE else None
            if found is None:
                self.regexes.append(pattern)
            else:
                self.literals.extend(found)
        self._literal = re.compile("|".join(map(re.escape, self.literals))).search if self.literals else None

    def may_match(self, text: str) -> bool:
        if self._literal is not None and self._literal(text):
            return True
        return any(r.search(text) for r in self.regexes)


def failure_signatures(role: str, extra: tuple[str, ...] = ()) -> tuple[Signature, ...]:
    """The role's failure signatures plus the user's own ``fail:`` patterns."""
    user = tuple(_sig(p, f"matched fail pattern {p!r}", USER_RANK) for p in extra)
    return user + ROLE_FAILURES.get(role, ())


class LineJudge:
    """Classifies a service's log lines: ready line, failure line, warning, or neither."""

    def __init__(self, ready: str | None, failures: tuple[Signature, ...]) -> None:
        self.ready = re.compile(ready) if ready else None
        self.failures = failures
        # One alternation finds out whether any signature matches at all; a quick
        # look for literal text tells most lines apart as ordinary before any regex runs.
        self._any_failure = re.compile("|".join(f"(?:{s.pattern.pattern})" for s in failures)) if failures else None
        self._anything = Prefilter([s.pattern for s in failures] + ([self.ready] if self.ready else []) + [_WARN_HINT])

    def failure(self, message: str) -> Signature | None:
        """The most telling signature the line matches, if any."""
        if self._any_failure is None or not self._any_failure.search(message):
            return None
        return max((s for s in self.failures if s.pattern.search(message)), key=lambda s: s.rank)

    def is_ready_line(self, message: str) -> bool:
        return bool(self.ready and self.ready.search(message))

    def kind(self, message: str, priority: int | None = None, system: bool = False) -> LineKind:
        if system:
            return LineKind.SYSTEM
        if not self._anything.may_match(message):
            return LineKind.WARN if priority is not None and priority <= 4 else LineKind.NORMAL
        if self.failure(message):
            return LineKind.FAIL
        if self.is_ready_line(message):
            return LineKind.READY
        if (priority is not None and priority <= 4) or _WARN.search(message):
            return LineKind.WARN
        return LineKind.NORMAL


@dataclass(slots=True)
class FailureCandidate:
    """The most telling failure line seen so far in one invocation."""

    signature: Signature
    line: str

    def consider(self, signature: Signature, line: str) -> None:
        if signature.rank > self.signature.rank:
            self.signature, self.line = signature, line
