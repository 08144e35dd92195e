"""Before anything starts: each server's launch flags and their values read against the engine installed where it
will run, as that engine's own parser takes them (servers/arguments.py).

Each host's Python is asked once per engine (every server there that runs it shares the answer), beside the
preflight's other reads, and the answer is kept per host, Python and version (servers/arguments_cache.py): a
later bring-up pays a Python's start. A flag the release does not have, or a value outside an option's choices, is
refused naming its line of the config; a variable of the engine's own it does not list is warned of. An engine
that cannot be asked (no such Python, an import that fails, no answer in time) is said, and nothing is refused.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from pdtui.config import BACKEND_ROLES, Deployment, ServiceConfig
from pdtui.config.defaults import DEFAULT_PYTHON
from pdtui.config.launch import LaunchSpec
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.session import Session
from pdtui.hosts.base import HostError
from pdtui.servers import (
    ARGUMENTS_MARK,
    ArgumentsCache,
    ArgumentsProbe,
    EngineArguments,
    Mismatch,
    describe_parser,
    probe_program,
    serving_for,
    unknown_env,
    unknown_words,
)

ASK_TIMEOUT = 180.0         # an engine's imports: 10-20 s on two busy cores; a loaded node takes longer
STAND_IN_PREFIX = "pdtui."  # pdtui's own stand-ins (the sim's workers) answer from their own parsers


@dataclass(frozen=True, slots=True)
class Asking:
    """One question to a host: which Python, running which module, and how its parser is built."""

    place: str
    python: str
    options: tuple[str, ...]      # the Python's own (-S), as the server runs it
    engine: str                   # the engine's name (the cache's key), or the stand-in's module
    parser: str                   # the probe's ``parser()``
    distributions: tuple[str, ...]
    env_prefix: str
    pythonpath: str | None        # the launch's PYTHONPATH: where its Python finds what it imports
    stand_in: bool                # pdtui's own (the sim's workers): described in-process; an engine is asked, and kept


def asking(cfg: ServiceConfig, probe: ArgumentsProbe) -> Asking | str:
    """How a server's engine is asked, or why it cannot be: a command that is not ``PYTHON -m MODULE``."""
    launch = cfg.launch
    assert launch is not None
    options: tuple[str, ...] = ()
    if launch.command is None:
        python, module = launch.python or DEFAULT_PYTHON, probe.module
    elif (found := python_module(launch.command)) is not None:
        python, options, module = found
    else:
        return f"its command ({launch.command[0]}) is not a Python running a module pdtui can ask"
    pythonpath = launch.env.get("PYTHONPATH")
    if module == probe.module:
        return Asking(cfg.host, python, options, cfg.engine, probe.parser, probe.distributions, probe.env_prefix,
                      pythonpath, stand_in=False)
    if module.startswith(STAND_IN_PREFIX):
        return Asking(cfg.host, python, options, module, "", (), "", pythonpath, stand_in=True)
    return f"its command runs {module}, not {probe.module}"


def python_module(command: Sequence[str]) -> tuple[str, tuple[str, ...], str] | None:
    """``PYTHON [-OPTION...] -m MODULE``: its Python, the Python's options (``-S``, ``-u``) and its module."""
    if "-m" not in command[1:-1]:
        return None
    at = command.index("-m", 1)
    options = tuple(command[1:at])
    return (command[0], options, command[at + 1]) if all(o.startswith("-") for o in options) else None


def program_words(launch: LaunchSpec) -> int:
    """How many words of a server's command line run its program (the rest are its flags)."""
    return len(launch.command) if launch.command is not None else 3       # PYTHON -m MODULE


class EngineFlags:
    """The launch flags of the servers a command starts, read against their engines: mismatches to judge, and
    notices of the engines that could not be asked."""

    def __init__(self, deployment: Deployment, sessions: Mapping[str, Session], runs: Mapping[str, ServiceRun],
                 tell: Callable[[str, str | None], None], cache: ArgumentsCache | None = None) -> None:
        self.deployment = deployment
        self.sessions = sessions
        self.runs = runs
        self.tell = tell            # (text, service): a warning for the user
        self.cache = cache or ArgumentsCache()

    async def mismatches(self, starting: Collection[str]) -> list[Mismatch]:
        """Every refusal and warning of the servers among ``starting`` that have a ``launch:`` block."""
        servers = [self.runs[n].cfg for n in sorted(starting) if n in self.runs and self.runs[n].cfg.launch is not None
                   and self.runs[n].cfg.role in BACKEND_ROLES and self.runs[n].cfg.host in self.sessions]
        asks: dict[str, Asking] = {}
        for cfg in servers:
            found = asking(cfg, serving_for(cfg).arguments_probe)
            if isinstance(found, str):
                self.tell(f"{cfg.name}: its flags were not checked: {found}", cfg.name)
            else:
                asks[cfg.name] = found
        distinct = list(dict.fromkeys(asks.values()))
        answers = dict(zip(distinct, await asyncio.gather(*(self._ask(a) for a in distinct)), strict=True))
        found_ones: list[Mismatch] = []
        for name, ask in asks.items():
            known = answers[ask]
            if isinstance(known, str):
                self.tell(f"{name}: its flags were not checked: {ask.python} could not tell what {ask.engine} "
                          f"takes: {known}", name)
            else:
                found_ones += self._judge(self.runs[name].cfg, known)
        return found_ones

    def _judge(self, cfg: ServiceConfig, known: EngineArguments) -> list[Mismatch]:
        """A server's command line and its launch's variables against what its engine takes."""
        launch = cfg.launch
        assert launch is not None
        words = serving_for(cfg).command_line(self.deployment, cfg)
        first, args_at = program_words(launch), len(words) - len(launch.args)
        at = ("services", cfg.server, "launch")
        found: list[Mismatch] = []
        for unknown in unknown_words(words[first:], known):
            index = first + unknown.index
            where = (self.deployment.where(*at, "args", index - args_at) if index >= args_at
                     else self._written_by(cfg, launch, unknown.word))
            found.append(_mismatch("error", cfg.name, unknown.word, where, unknown.text))
        for name, text in unknown_env(list(launch.env), known):
            found.append(_mismatch("warning", cfg.name, name, self.deployment.where(*at, "env", name, on="key"), text))
        return found

    def _written_by(self, cfg: ServiceConfig, launch: LaunchSpec, word: str) -> str:
        """Where the config says a word pdtui writes itself: its launch key (a transfer backend), else the block."""
        at = ("services", cfg.server, "launch")
        if "transfer_backend" in launch.model_fields_set and word == launch.transfer_backend:
            return self.deployment.where(*at, "transfer_backend")
        return self.deployment.where(*at, on="key")

    async def _ask(self, ask: Asking) -> EngineArguments | str:
        """What the engine at ``ask`` takes (from the cache when the installed version is the one kept), or why it
        could not tell."""
        if ask.stand_in:
            return stand_in_arguments(ask.engine)
        kept = self.cache.load(ask.place, ask.python, ask.engine)
        argv = [*(["env", f"PYTHONPATH={ask.pythonpath}"] if ask.pythonpath else []), ask.python, *ask.options, "-c",
                probe_program(ask.parser), ",".join(ask.distributions), kept["version"] if kept else ""]
        try:
            result = await self.sessions[ask.place].host.run(argv, timeout=ASK_TIMEOUT)
        except HostError as exc:
            return str(exc)
        answer = _answer(result.stdout)
        if not result.ok or answer is None:
            return result.last_words
        if answer.get("version") is None:
            return f"{' or '.join(ask.distributions)} is not installed there"
        if "options" not in answer:
            if kept is None or kept["version"] != answer["version"]:
                return f"it answered version {answer['version']} alone"
            answer = kept
        else:
            self.cache.keep(ask.place, ask.python, ask.engine, answer)
        try:
            return EngineArguments.from_answer(ask.engine, answer, ask.env_prefix)
        except ValueError as exc:
            return str(exc)


@functools.cache
def stand_in_arguments(module: str) -> EngineArguments:
    """What one of pdtui's own stand-ins (the sim's workers) takes, asked in pdtui's process: its parser is pdtui's
    own code, the same wherever this pdtui runs it, and asking it on its host cost a Python's start (and the sim's
    imports) at every bring-up of a demo."""
    built = importlib.import_module(module).build_parser()
    return EngineArguments.from_answer(module, describe_parser(built, ""))


def _answer(stdout: str) -> dict | None:
    """The probe's marked line, read (None: no such line, or not JSON of a mapping)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(ARGUMENTS_MARK):
            try:
                answer = json.loads(line[len(ARGUMENTS_MARK):])
            except ValueError:
                return None
            return answer if isinstance(answer, dict) else None
    return None


def _mismatch(level: str, service: str, word: str, where: str, text: str) -> Mismatch:
    """A refused (or warned of) flag, value or variable, as the preflight tells and judges it."""
    return Mismatch(level, "flags", (service,), word, (word,), (where,), f"{service}: {where}: {text}")

