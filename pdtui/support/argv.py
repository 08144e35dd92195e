"""A command line's flags read as a program's argument parser reads them: ``--name VALUE`` or ``--name=VALUE``."""

from __future__ import annotations

from collections.abc import Sequence


def flag_value(words: Sequence[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE``, the last one given."""
    value = None
    prefix, last = name + "=", len(words) - 1
    for index, word in enumerate(words):
        if word == name:
            if index < last:
                value = words[index + 1]
        elif word.startswith(prefix):
            value = word[len(prefix):]
    return value


def flag_values(words: Sequence[str]) -> dict[str, str]:
    """Every ``--name VALUE`` and ``--name=VALUE`` at once, each flag's last value: :func:`flag_value` for each."""
    values: dict[str, str] = {}
    for index, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, equals, value = word.partition("=")
        if equals:
            values[name] = value
        elif index + 1 < len(words):
            values[word] = words[index + 1]
    return values
