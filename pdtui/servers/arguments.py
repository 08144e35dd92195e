"""What an installed serving engine's server takes, as its own parser says, and a command line read against it.

A renamed flag, or a choice the installed release lacks (a transfer backend, an attention backend), makes a server
exit at start, or start and serve nothing. The preflight asks each host's engine once for its parser (the program
of servers/arguments_probe.py, run by the engine's own Python) and reads every word of a server's command line the
way that parser would: ``--flag value``, ``--flag=value``, a long flag cut short where argparse allows it, and
vLLM's ``_`` for ``-`` and ``--json-flag.key``. What no option is, or a value outside an option's choices, is told
with the nearest the engine knows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtui.config.errors import did_you_mean, show

PROBE_FILE = Path(__file__).with_name("arguments_probe.py")
MARK = "pdtui-arguments: "          # the probe's answer line (arguments_probe.MARK)
SHOWN_CHOICES = 12                  # a refusal lists this many of an option's choices at most
_NUMBER = re.compile(r"-\d+$|-\d*\.\d+$")
# Clears the caller's working folder off the import path before anything is imported: a file there named like a
# standard module would be imported instead of it.
_PRELUDE = "import sys\nsys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"


def probe_program(parser: str) -> str:
    """The ``python -c`` program that asks an engine: the probe, ``parser`` (its engine's ``def parser()``), run."""
    return f"{_PRELUDE}{PROBE_FILE.read_text(encoding='utf-8')}\n{parser}\nrun(parser)\n"


@dataclass(frozen=True, slots=True)
class Option:
    """One option string of the parser: how many words it takes (argparse's ``nargs``) and, where argparse compares
    the word as written, its choices."""

    nargs: int | str | None
    choices: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class EngineArguments:
    """An installed engine's server options, as its parser gave them; ``env``: the environment variables it lists
    (None: it lists none pdtui trusts), checked when they begin with ``env_prefix``."""

    label: str                      # the engine as a finding names it: "sglang 0.5.23"
    options: Mapping[str, Option]
    abbrev: bool = True             # a long flag may be cut short while it stays unambiguous
    dashes: bool = False            # a flag's "_" reads as "-" (vLLM)
    dotted: bool = False            # --json-flag.key value sets one key of a JSON flag (vLLM)
    env: frozenset[str] | None = None
    env_prefix: str = ""

    @classmethod
    def from_answer(cls, name: str, answer: Mapping[str, Any], env_prefix: str = "") -> EngineArguments:
        """The probe's answer (its JSON) for engine ``name``; ValueError when it is not one."""
        try:
            options = {flag: Option(o["nargs"], tuple(o["choices"]) if o["choices"] is not None else None)
                       for flag, o in answer["options"].items()}
            env = answer.get("env")
            version = answer.get("version") or ""
            return cls(f"{name} {version}".strip(), options, bool(answer.get("abbrev", True)),
                       bool(answer.get("dashes")), bool(answer.get("dotted")),
                       frozenset(env) if env is not None else None, env_prefix)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a parser's description: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class Unknown:
    """A word of a command line the engine would refuse: its index, and what is wrong with it."""

    index: int
    word: str
    text: str


def is_option(word: str) -> bool:
    """Whether argparse reads ``word`` as an option (a negative number is a value)."""
    return len(word) > 1 and word.startswith("-") and not _NUMBER.match(word)


def unknown_words(words: Sequence[str], known: EngineArguments) -> list[Unknown]:
    """The words of ``words`` (a command line's flags and values, its program left out) ``known`` would refuse:
    options it has not, and values outside an option's choices."""
    found: list[Unknown] = []
    at = 0
    while at < len(words):
        word = words[at]
        at += 1
        if not is_option(word):
            continue        # a value or a positional: an option's own values are read with it below
        name, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        flag, problem = resolve(name, known)
        if flag is None:
            found.append(Unknown(at - 1, word, problem))
            continue
        option = known.options[flag]
        values = [(at - 1, inline)] if eq else [(at + n, v) for n, v in enumerate(taken(words[at:], option.nargs))]
        at += 0 if eq else len(values)
        found += [Unknown(index, value, refused_choice(known, flag, value, option.choices))
                  for index, value in values if option.choices is not None and value not in option.choices]
    return found


def taken(rest: Sequence[str], nargs: int | str | None) -> list[str]:
    """The words after an option that argparse gives it: one (``None``, ``?``: when there is one), ``N``, or every
    word up to the next option (``*``, ``+``); all that is left for a remainder (``...``, ``A...``)."""
    if nargs in ("...", "A..."):
        return list(rest)
    limit = nargs if isinstance(nargs, int) else 1 if nargs in (None, "?") else len(rest)
    values: list[str] = []
    for word in rest[:limit]:
        if is_option(word):
            break
        values.append(word)
    return values


def resolve(name: str, known: EngineArguments) -> tuple[str | None, str]:
    """The option ``name`` is to ``known``'s parser (None, and why, when it is none or could be several)."""
    base = name
    if known.dotted and base.startswith("--") and "." in base:
        base = base.partition(".")[0]        # --kv-transfer-config.kv_connector: a key of --kv-transfer-config
    if known.dashes and base.startswith("--"):
        base = "--" + base[2:].replace("_", "-")
    if base in known.options:
        return base, ""
    if known.dashes and re.match(r"-O.", base) and "--optimization-level" in known.options:
        return "--optimization-level", ""    # vLLM's -O3, -O=3
    longs = [flag for flag in known.options if flag.startswith("--")]
    if known.abbrev and base.startswith("--"):
        prefixed = [flag for flag in longs if flag.startswith(base)]
        if len(prefixed) == 1:
            return prefixed[0], ""
        if len(prefixed) > 1:
            could = ", ".join(prefixed[:4]) + (", ..." if len(prefixed) > 4 else "")
            return None, f"{name} is ambiguous to {known.label}: it could be {could}"
    return None, f"{known.label} has no {name}{did_you_mean(base, longs)}"


def refused_choice(known: EngineArguments, flag: str, value: str, choices: Sequence[str]) -> str:
    """What a value outside an option's choices is told with: the choices (the first few), the nearest."""
    shown = ", ".join(choices[:SHOWN_CHOICES]) + (", ..." if len(choices) > SHOWN_CHOICES else "")
    return f"{known.label} has no {flag} {show(value)}{did_you_mean(value, choices)}: it takes {shown}"


def unknown_env(names: Sequence[str], known: EngineArguments) -> list[tuple[str, str]]:
    """Each of ``names`` that begins with the engine's prefix and is not a variable it lists, with what it is told
    with (none when the engine lists none)."""
    if known.env is None or not known.env_prefix:
        return []
    return [(name, f"{known.label} reads no {name}{did_you_mean(name, sorted(known.env))}")
            for name in names if name.startswith(known.env_prefix) and name not in known.env]
