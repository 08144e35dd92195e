"""What makes a service ready, and what makes it failed, judged line by line.

Pure logic, no I/O: the orchestrator feeds journal lines of a unit's current
invocation to a :class:`LineJudge` and runs the HTTP/TCP checks itself. What
each line means lives in signatures.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ahocorasick_rs import AhoCorasick

from pdtui.config.regex import Bounded
from pdtui.engine.events import LineKind
from pdtui.vocabulary.signatures import Searched, Severity, Signature

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
    """Which of some patterns a line may match: one Aho-Corasick pass for the literal ones, regex for the rest.

    Most signatures are plain text, and a pattern given with a literal hint
    (text every match holds) is looked for by its hint. All of them are looked
    for in one pass over the line (ahocorasick_rs): 0.7 µs for an ordinary
    batch line, where the same literals as one escaped regex alternation took
    5.7 µs and the signatures' own patterns (groups, ``\b``) several each.
    """

    def __init__(self, patterns: list[Searched | str]) -> None:
        self.literals: list[str] = []
        self.regexes: list[Searched] = []
        self._of_literal: list[int] = []            # the pattern each literal stands for
        self._of_regex: list[int] = []
        texts: list[str] | None
        for index, pattern in enumerate(patterns):
            if isinstance(pattern, str):
                texts = [pattern]
            elif pattern.flags & re.IGNORECASE or (texts := _literals(pattern.pattern)) is None:
                self.regexes.append(pattern)
                self._of_regex.append(index)
                continue
            self.literals.extend(texts)
            self._of_literal.extend([index] * len(texts))
        self._literal = AhoCorasick(self.literals).find_matches_as_indexes if self.literals else None

    def hits(self, text: str) -> list[int]:
        """The patterns ``text`` may match, by their place in the list given, in its order (empty for most lines:
        then no pattern matches)."""
        literals = self._literal(text, overlapping=True) if self._literal is not None else ()
        if not literals and not self.regexes:
            return []
        found = {self._of_literal[literal] for literal, _, _ in literals}
        for index, regex in zip(self._of_regex, self.regexes, strict=True):
            if regex.search(text):
                found.add(index)
        return sorted(found)


class LineJudge:
    """Classifies a service's log lines: ready line, fatal, warning, transfer error, evidence, or none."""

    def __init__(self, ready: str | None, signatures: tuple[Signature, ...]) -> None:
        self.signatures = signatures
        self.ready, self._prefilter = _compiled(ready, signatures)
        self._bounded = [p for p in (self.ready, *(s.pattern for s in signatures)) if isinstance(p, Bounded)]
        self._told: set[str] = set()

    def slow_patterns(self) -> list[str]:
        """The config's patterns a search of which was cut short since last asked, each told once: on that line
        they matched nothing."""
        slow = [p.pattern for p in self._bounded if p.timed_out and p.pattern not in self._told]
        self._told.update(slow)
        return slow

    def signature(self, message: str) -> Signature | None:
        """The most telling signature the line matches, if any: a fatal one before any other kind."""
        return self._telling(message, self._prefilter.hits(message))

    def _telling(self, message: str, hits: list[int]) -> Signature | None:
        """The most telling of the signatures among the prefilter's ``hits`` that the line matches: only those
        are searched (a line that holds one signature's text is not searched for the other forty)."""
        signatures = self.signatures
        matched = [found for index in hits if index < len(signatures)
                   and (found := signatures[index]).pattern.search(message)]
        return max(matched, key=lambda s: (s.severity is Severity.FATAL, s.rank)) if matched else None

    def failure(self, message: str) -> Signature | None:
        """The most telling fatal signature the line matches, if any."""
        found = self.signature(message)
        return found if found is not None and found.severity is Severity.FATAL else None

    def telling_pattern(self) -> str:
        """One regular expression for every line that decides a judgement: the ready line and the signatures
        that fail a service or prove a check. What ``journalctl --grep`` looks for in a long history."""
        telling = [s.pattern.pattern for s in self.signatures
                   if s.severity is Severity.FATAL or (s.severity is Severity.EVIDENCE and s.check)]
        if self.ready is not None:
            telling.append(self.ready.pattern)
        return "|".join(f"(?:{p})" for p in telling)

    def is_ready_line(self, message: str) -> bool:
        return bool(self.ready and self.ready.search(message))

    def judge(self, message: str, priority: int | None = None,
              system: bool = False) -> tuple[LineKind, Signature | None]:
        """How to show the line, and the signature it matched (None for most lines)."""
        if system:
            return LineKind.SYSTEM, None
        hits = self._prefilter.hits(message)
        if not hits:
            return (LineKind.WARN if priority is not None and priority <= 4 else LineKind.NORMAL), None
        found = self._telling(message, hits)
        if found is not None and found.severity is Severity.FATAL:
            return LineKind.FAIL, found
        if self.is_ready_line(message):
            return LineKind.READY, found
        if found is not None and found.severity in (Severity.WARNING, Severity.TRANSFER, Severity.HANG):
            return LineKind.WARN, found
        if (priority is not None and priority <= 4) or _WARN.search(message):
            return LineKind.WARN, found
        return LineKind.NORMAL, found

    def kind(self, message: str, priority: int | None = None, system: bool = False) -> LineKind:
        return self.judge(message, priority, system)[0]


def _compiled(ready: str | None, signatures: tuple[Signature, ...]) -> tuple[Bounded | None, Prefilter]:
    """The ready pattern and the prefilter of the signatures (in their order), the ready line and warnings (~0.5 ms
    to make: a fleet's thousand services share one judge per kind of service, targets/registry.py). A quick look
    for literal text tells most lines apart as ordinary before any regex runs, and names the few signatures a line
    may match."""
    ready_pattern = Bounded(ready) if ready else None
    hints: list[Searched | str] = [s.hint or s.pattern for s in signatures]
    return ready_pattern, Prefilter(hints + ([ready_pattern] if ready_pattern else []) + [_WARN_HINT])


@dataclass(slots=True)
class FailureCandidate:
    """The most telling fatal line seen so far in one invocation."""

    signature: Signature
    line: str

    def consider(self, signature: Signature, line: str) -> None:
        if signature.rank > self.signature.rank:
            self.signature, self.line = signature, line
