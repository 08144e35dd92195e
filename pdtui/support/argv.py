"""A command line's flags read as a program's argument parser reads them: ``--name VALUE`` or ``--name=VALUE``."""

from __future__ import annotations

from collections.abc import Sequence


def flag_value(words: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE``, the last one given."""
    value = None
    for index, word in enumerate(words):
        if word == name and index + 1 < len(words):
            value = words[index + 1]
        elif word.startswith(name + "="):
            value = word.partition("=")[2]
    return value


def has_flag(words: Sequence[str], name: str) -> bool:
    """Whether a switch (a flag without a value) is given."""
    return any(word == name or word.startswith(name + "=") for word in words)
