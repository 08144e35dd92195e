"""TAB completion of pdtui's command line, through argcomplete: commands, options, config files and service names.

The shell runs pdtui itself on every TAB (argcomplete's protocol: ``_ARGCOMPLETE`` set, the line in ``COMP_LINE``),
so this module imports nothing heavy and its completers read as little as they can: a config's top-level
``services`` (``yaml.safe_load``, so a config's commands never run), and a config pdtui finds by itself only when
pdtui would use it (config/trust.py). A completer that fails completes nothing: a TAB must never print into the
shell, nor a traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")
"""The shells argcomplete writes a script for (``pdtui completion SHELL``)."""

YAML_SUFFIXES = (".yaml", ".yml")

Completer = Callable[..., list[str]]


def complete(build: Callable[[bool], argparse.ArgumentParser], env: Mapping[str, str] = os.environ) -> None:
    """Answer the shell's TAB (argcomplete writes the candidates on fd 8 and exits) when it is asking; else return.

    ``build(demo)`` makes the command line's parser, with ``demo``'s own options when the line is a ``pdtui demo``
    (they come from the simulator, loaded only then)."""
    if "_ARGCOMPLETE" not in env:
        return
    import argcomplete
    words = _words(env)
    parser = build(words[:1] == ["demo"])
    _attach(parser)
    if words[:1] and words[0].startswith("-") and words[0] not in ("-h", "--help", "--version"):
        parser = _subcommands(parser)["status"]     # options alone go to status, as pdtui runs them
    argcomplete.autocomplete(parser, always_complete_options=False, default_completer=argcomplete.SuppressCompleter())


def shell_script(shell: str) -> str:
    """The script that turns completion on in ``shell``: what ``register-python-argcomplete --shell SHELL pdtui``
    prints."""
    import argcomplete
    return argcomplete.shellcode(["pdtui"], shell=shell)


def _words(env: Mapping[str, str]) -> list[str]:
    """The words of the line before the one being completed, after pdtui's own name (``python -m pdtui`` as
    ``pdtui``)."""
    from argcomplete import split_line
    try:
        words = split_line(env["COMP_LINE"], int(env["COMP_POINT"]))[3]
        return words[int(env["_ARGCOMPLETE"]):]
    except (KeyError, ValueError):
        return []


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by its name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _attach(parser: argparse.ArgumentParser) -> None:
    """Give each argument its completer by what it names (its dest): every ``config`` a config file, every
    ``[CONFIG] SERVICE...`` a config or the services of one. The rest complete as argparse defines them (their
    choices), or to nothing: a duration or a port is no file name."""
    completers: dict[str, Completer] = {
        "config": config_files, "path": config_files, "targets": config_or_services,
        "out": folders, "cert": files, "key": files}
    for sub in _subcommands(parser).values():
        for action in sub._actions:
            if action.dest in completers and action.nargs != 0:     # a flag (schema --path) takes no value
                action.completer = completers[action.dest]  # type: ignore[attr-defined]


def quietly(completer: Callable[..., Iterable[str]]) -> Completer:
    """``completer``, completing nothing where it would fail: an error would be printed into the user's shell."""
    @functools.wraps(completer)
    def guarded(**kwargs: Any) -> list[str]:
        try:
            return list(completer(**kwargs))
        except Exception:
            return []
    return guarded


def _entries(prefix: str, keep: Callable[[os.DirEntry[str]], bool]) -> list[str]:
    """The entries of the folder ``prefix`` is in that begin as it does and that ``keep`` accepts, as typed (a
    leading ``~`` kept), each folder with its ``/``; hidden ones only when the name typed begins with a dot."""
    folder, start = os.path.split(prefix)
    found = []
    with os.scandir(os.path.expanduser(folder) or ".") as entries:
        for entry in entries:
            if entry.name.startswith(start) and (start.startswith(".") or not entry.name.startswith(".")) and keep(entry):
                found.append(os.path.join(folder, entry.name) + ("/" if entry.is_dir() else ""))
    return sorted(found)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    return entry.is_dir()


def _is_config(entry: os.DirEntry[str]) -> bool:
    """A folder (a config may be further in) or a YAML file."""
    return entry.is_dir() or entry.name.endswith(YAML_SUFFIXES) and entry.is_file()


@quietly
def config_files(prefix: str, **_: Any) -> list[str]:
    """YAML files (``*.yaml``, ``*.yml``) and the folders that may hold them."""
    return _entries(prefix, _is_config)


@quietly
def folders(prefix: str, **_: Any) -> list[str]:
    """Folders only (``units --out DIR``)."""
    return _entries(prefix, _is_dir)


@quietly
def files(prefix: str, **_: Any) -> list[str]:
    """Any file, and folders to reach it (``--cert``, ``--key``)."""
    return _entries(prefix, lambda entry: True)


@quietly
def config_or_services(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """For ``restart``'s and ``down``'s ``[CONFIG] SERVICE...``: the services of the config named earlier on the line
    (and their roles' words); else those of the config pdtui finds by itself, and config files, as CONFIG may
    still come."""
    from pdtui.commands.targets import config_among
    given = list(getattr(parsed_args, "targets", None) or [])
    at = config_among(given)
    if at is not None:
        return [name for name in service_names(given[at]) if name not in given]
    found = discovered_config(os.environ)
    names = quietly(service_names)(path=found) if found else []
    return [name for name in names if name not in given] + config_files(prefix=prefix)


def discovered_config(env: Mapping[str, str]) -> str | None:
    """The config bare ``pdtui`` finds, when pdtui would use it unnamed (config/trust.py); else None."""
    from pathlib import Path

    from pdtui.config.discovery import find_config
    from pdtui.config.trust import distrust
    found, _ = find_config(env, Path.cwd())
    if found is None or distrust(found):
        return None
    return str(found)


def service_names(path: str) -> list[str]:
    """The names of the services of the config at ``path``, in its order, then the words of the roles among them
    (``prefills``, ``decodes``); read with ``yaml.safe_load``, which builds plain data and runs nothing."""
    import yaml

    from pdtui.commands.targets import ROLE_WORDS
    with open(os.path.expanduser(path), encoding="utf-8") as stream:
        config = yaml.safe_load(stream)
    services = config.get("services") if isinstance(config, dict) else None
    if not isinstance(services, dict):
        return []
    names = [name for name in services if isinstance(name, str)]
    roles = {entry.get("role") for entry in services.values() if isinstance(entry, dict)}
    return names + [word for word, role in ROLE_WORDS.items() if role in roles and word not in names]
