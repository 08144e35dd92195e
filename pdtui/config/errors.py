"""Error wording: one :class:`ConfigError` line, ``FILE:LINE:COL: what was expected``.

Validators raise through :func:`fail`, which carries the path of the offending node relative to where
pydantic reports the error, so a check made on the whole deployment can still point at the exact entry.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import PydanticCustomError

from pdtui.support.text import inert

NodePath = tuple[str | int, ...]

MAX_MESSAGE_CHARS = 1000
"""Longest message an error line shows: it quotes keys and values of the file, each cut short already."""


class ConfigError(Exception):
    """A config that cannot be used, as one line the user can act on.

    The line is inert: the file's name and whatever the message quotes of it (keys, values) come from the file's
    author, and a terminal escape in either must show as text, never act on the terminal that prints the error.
    ``source`` keeps the file's name as given.
    """

    def __init__(self, source: str, line: int, col: int, message: str) -> None:
        self.source = source
        self.line = line
        self.col = col
        self.message = inert(" ".join(message.splitlines()), MAX_MESSAGE_CHARS)
        super().__init__(f"{inert(source)}:{line}:{col}: {self.message}")



def show(value: Any) -> str:
    """A value as the user wrote it, on one line and short."""
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "a list" if value else "an empty list"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    text = " ".join(text.splitlines())
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else ``""``."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def show_key(key: Any) -> str:
    """A key of the file, quoted, on one line and short: what its author wrote, escapes shown as text."""
    return show(str(key))


@dataclass(frozen=True)
class Wording:
    """How errors name what a config holds: an entry of a section of named entries (``hosts`` -> ``host 'gpu0'``),
    and an entry of a list of a service (``hosts`` -> ``rank {index} of service {service} (its hosts entry)``)."""

    sections: Mapping[str, str] = field(default_factory=lambda: {"services": "service"})
    items: Mapping[str, str] = field(default_factory=dict)

    def describe(self, path: NodePath) -> str:
        """Where a mapping sits, in the words of an error message."""
        if not path:
            return "the top level"
        what = self.sections.get(str(path[0]))
        if len(path) == 2 and what:
            return f"{what} {show_key(path[1])}"
        if len(path) == 3 and what:
            return f"{show_key(path[2])} of {what} {show_key(path[1])}"
        if len(path) == 4 and path[0] == "services" and (said := self.items.get(str(path[2]))):
            return said.format(index=path[3], service=show_key(path[1]))
        return show_key(".".join(str(part) for part in path))

    def unknown_key(self, parent: NodePath, key: str, known: Iterable[str]) -> str:
        return f"unknown key {show_key(key)} in {self.describe(parent)}{did_you_mean(key, known)}"


def unknown_key(parent: NodePath, key: str, known: Iterable[str]) -> str:
    """An unknown key of a file whose wording is the default's (no sections but ``services``)."""
    return Wording().unknown_key(parent, key, known)


def fail(message: str, *at: str | int, on: str = "value") -> PydanticCustomError:
    """An error for pydantic to carry; ``at`` is the offending node below the
    validated object, ``on`` says whether to point at its key or its value."""
    return PydanticCustomError("pdtui", "{message}", {"message": message, "at": at, "on": on})

