"""A config's regular expressions (``fail:``, ``ready.log``): valid, and of a shape that cannot take exponential time.

Python's ``re`` backtracks. A repeat inside a repeat (``(a+)+``, ``(a*)*``, ``(a{1,10}){1,10}``) or a repeat over
alternatives that can match the same text (``(a|a)*``, ``(a|aa)+``) tries every way of splitting a line among its
iterations before it gives up: on a line that almost matches, time exponential in the line's length (30 characters
take seconds). pdtui applies these patterns to every line its services log, so such a shape is refused when the config
is loaded, by looking at the tree Python's own regex parser makes of it. A bound on the line's length where the
patterns are applied would not do: the time is exponential in the bound.

What is refused, inside any repeat that may run more than once:

- another repeat that may run more than once, unless it is possessive (``a++``) or in an atomic group (``(?>a+)``),
  which never give back what they took, or unless both are bounded and the ways they can split a match are few
  (``(\\d{1,3}\\.){3}``, an IPv4 address, splits one in 27 ways at most);
- alternatives that can begin with the same character, or one that can match nothing.

The check is conservative: a few patterns that are in fact fast (``(ab+)*``) are refused too, and the message says how
to write them (a possessive repeat, an atomic group, a character class, ``?``).

No check of a shape catches every slow pattern: repeats that follow one another over the same characters
(``\\s*\\s*\\s*$``, ``.*a.*a.*b``) take polynomial time in ``re``, a minute for one search of a line of 50 blanks. So
a config's patterns are searched by :class:`Bounded`: the ``regex`` package (re's syntax, more of its shapes fast),
with a bound on the time of each search; a search past it matches nothing, and the pattern says so once.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import regex as bounded_re

_parser: Any = importlib.import_module("re._parser")    # the parser re itself uses: the only tree of a pattern

SEARCH_LIMIT = 0.05
"""Seconds one search of a config's pattern may take on one line: an ordinary one takes microseconds."""

MAX_WAYS = 1000
"""The most ways bounded repeats inside repeats may split a match at one place: more is as bad as unbounded."""

_UNBOUNDED = _parser.MAXREPEAT
_REPEATS = (_parser.MAX_REPEAT, _parser.MIN_REPEAT)
_BARRIERS = (_parser.POSSESSIVE_REPEAT, _parser.ATOMIC_GROUP)   # never backtracked into once they matched
_ZERO_WIDTH = (_parser.AT, _parser.ASSERT, _parser.ASSERT_NOT)

NESTED = ("it has a repeat inside a repeat (like (a+)+ or (a*)*); make the inner one possessive (a++) or atomic "
          "((?>a+)), or write them as one repeat")
ALIKE = ("it repeats alternatives that can match the same text (like (a|a)* or (a|ab)+); make each alternative begin "
         "differently, or use a character class or '?'")


class Bounded:
    """A config's pattern, searched with a bound on time (``SEARCH_LIMIT`` a line): ``pattern`` and ``flags`` as
    ``re``'s, and ``timed_out`` once a search was cut short (it then matched nothing; the caller says so once)."""

    __slots__ = ("_compiled", "flags", "pattern", "timed_out")

    def __init__(self, pattern: str) -> None:
        self._compiled = bounded_re.compile(pattern, bounded_re.VERSION0)     # re's syntax and meaning
        self.pattern = pattern
        self.flags: int = self._compiled.flags
        self.timed_out = False

    def search(self, text: str) -> bounded_re.Match[str] | None:
        try:
            return self._compiled.search(text, timeout=SEARCH_LIMIT)
        except TimeoutError:
            self.timed_out = True
            return None


def hazard(pattern: str) -> str | None:
    """Why ``pattern`` can take exponential time (the words of an error message), or None when it cannot.

    ``pattern`` compiles (the caller checked).
    """
    return _walk(_parser.parse(pattern), 0)


def _walk(items: Any, around: float) -> str | None:
    """The first hazard in a sequence of parsed items; ``around``: how many times the repeats around them may run, all
    told (0: none around them; infinite: an unbounded one)."""
    for op, av in items:
        found = _item(op, av, around)
        if found:
            return found
    return None


def _item(op: Any, av: Any, around: float) -> str | None:
    """The hazard in one parsed item, given the repeats around it."""
    if op in _REPEATS:
        high, body = av[1], av[2]
        if high <= 1:
            return _walk(body, around)
        if around and (math.isinf(around) or high == _UNBOUNDED or around * math.log(high) > math.log(MAX_WAYS)):
            return NESTED      # splits a match in about high ** around ways
        return _walk(body, math.inf if high == _UNBOUNDED else max(around, 1) * high)
    if op in _BARRIERS:
        return _walk(av[2] if op == _parser.POSSESSIVE_REPEAT else av, 0)
    if op == _parser.SUBPATTERN:
        return _walk(av[3], around)
    if op == _parser.BRANCH:
        found = next((found for branch in av[1] if (found := _walk(branch, around))), None)
        return found or (ALIKE if around and _alike(av[1]) else None)
    if op in (_parser.ASSERT, _parser.ASSERT_NOT):
        return _walk(av[1], around)
    if op == _parser.GROUPREF_EXISTS:
        return _walk(av[1], around) or (_walk(av[2], around) if av[2] is not None else None)
    return None


# --------------------------------------------------------------------------- what an alternative can begin with

Spans = list[tuple[int, int]]
Atom = tuple[bool, Spans]
"""Characters an alternative may begin with: ``(False, spans)`` one of the spans' code points, ``(True, spans)`` any
but those (a negated class)."""

_ANY = None
"""Any character: what a category, ``.`` or a back-reference may begin with, as far as this check knows."""


def _alike(branches: list[Any]) -> bool:
    """Whether two alternatives can begin with the same character, or one can match nothing."""
    seen: list[Atom] = []
    for branch in branches:
        firsts, empty = _firsts(branch)
        if empty or firsts is _ANY or any(_overlap(one, other) for one in seen for other in firsts):
            return True
        seen += firsts
    return False


def _overlap(one: Atom, other: Atom) -> bool:
    """Whether two atoms share a character (two negated classes always do, as far as this check knows)."""
    (one_not, one_spans), (other_not, other_spans) = one, other
    if one_not and other_not:
        return True
    if one_not or other_not:
        excluded, spans = (one_spans, other_spans) if one_not else (other_spans, one_spans)
        return not all(any(x <= low and high <= y for x, y in excluded) for low, high in spans)
    return any(low <= y and x <= high for low, high in one_spans for x, y in other_spans)


def _firsts(items: Any) -> tuple[list[Atom] | None, bool]:
    """The atoms a sequence may begin with (``_ANY`` for any character), and whether it can match nothing."""
    atoms: list[Atom] = []
    for op, av in items:
        found, empty = _first_of(op, av)
        if found is _ANY:
            return _ANY, False
        atoms += found
        if not empty:
            return atoms, False
    return atoms, True


def _first_of(op: Any, av: Any) -> tuple[list[Atom] | None, bool]:
    """What one parsed item may begin with, and whether it can match nothing."""
    if op == _parser.LITERAL:
        return [(False, _cased(av))], False
    if op == _parser.NOT_LITERAL:
        return [(True, [(av, av)])], False
    if op == _parser.IN:
        return _class(av), False
    if op in _REPEATS or op == _parser.POSSESSIVE_REPEAT:
        found, empty = _firsts(av[2])
        return found, empty or av[0] == 0
    if op == _parser.SUBPATTERN:
        return _firsts(av[3])
    if op == _parser.ATOMIC_GROUP:
        return _firsts(av)
    if op == _parser.BRANCH:
        atoms: list[Atom] = []
        nothing = False
        for branch in av[1]:
            found, empty = _firsts(branch)
            if found is _ANY:
                return _ANY, False
            atoms, nothing = atoms + found, nothing or empty
        return atoms, nothing
    if op in _ZERO_WIDTH:
        return [], True
    return _ANY, False


def _class(items: list[tuple[Any, Any]]) -> list[Atom] | None:
    """A character class of literals and ranges, perhaps negated, as one atom; any other (a category) as any."""
    negated = bool(items) and items[0][0] == _parser.NEGATE
    spans: Spans = []
    for kind, value in items[negated:]:
        if kind == _parser.LITERAL:
            spans += _cased(value)
        elif kind == _parser.RANGE:
            spans.append((value[0], value[1]))
        else:
            return _ANY
    return [(negated, spans)]


def _cased(code: int) -> Spans:
    """A literal character and its other case (a pattern may ignore case)."""
    char = chr(code)
    return [(ord(c), ord(c)) for c in {char, char.lower(), char.upper()} if len(c) == 1]
