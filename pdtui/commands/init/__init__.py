"""``pdtui init [PATH]``: write a commented ``pdtui.yaml`` for this machine.

It looks at the machine the way the preflight does (nvidia-smi's GPUs and
their NUMA nodes, the SGLang units systemd knows), makes a config of what is
there (see :mod:`pdtui.commands.init.draft`), checks that the config loads, and writes it.
An existing file is never replaced: someone's edited config is worth more than
a fresh draft.

The tools run through a host and its ``commands:`` wrappers, both given, so a
test points them at a simulated machine.
"""

from __future__ import annotations

import asyncio
import shlex
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from pdtui.commands.init.draft import DEFAULT_COMMANDS, Draft, ServiceDraft, make_draft
from pdtui.commands.init.draft_yaml import render
from pdtui.commands.init.survey import survey
from pdtui.config import ConfigError, parse_config
from pdtui.gpus.nvidia_smi import gpu_ranges
from pdtui.hosts.base import Host
from pdtui.support.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from pdtui.targets import PLACEMENTS

_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"


def run(path: Path, *, host: Host | None = None, commands: Mapping[str, Sequence[str]] | None = None) -> int:
    """The command: write the config for this machine (``host``: a LocalHost named after it) at ``path``."""
    if host is None:
        from pdtui.hosts.local import LocalHost
        host = LocalHost(machine_name())
    return asyncio.run(init(path, host, commands or DEFAULT_COMMANDS))


async def init(path: Path, host: Host, commands: Mapping[str, Sequence[str]], *,
               out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Survey ``host`` with ``commands``, write its config at ``path`` and say what next; the exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    if path.is_dir():      # `pdtui init ~/deploy/`: the file goes inside
        path = path / "pdtui.yaml"
    if path.exists() or path.is_symlink():
        return _refuse(f"{path} already exists; not overwriting it (move it away or give another PATH)", err)
    if not path.parent.is_dir():
        return _refuse(f"cannot write {path}: no folder {path.parent}", err)
    found = await survey(host, commands)
    draft = make_draft(found, host.name, commands)
    text = render(draft, shlex.quote(str(path)))
    try:
        parse_config(text, str(path), PLACEMENTS)
    except ConfigError as exc:     # a bug here, not the user's: nothing is written
        print(f"pdtui init: the config it made does not load, so nothing was written: {exc}", file=err)
        return EXIT_FAILED
    if (problem := _write(path, text)) is not None:
        return _refuse(problem, err)
    _report(path, draft, out)
    return EXIT_OK


def machine_name() -> str:
    """This machine's host name as a config key (letters, digits, ``_ . -``), ``local`` if it has none."""
    name = "".join(ch if ch in _NAME_CHARS else "-" for ch in socket.gethostname().split(".")[0])
    name = name.lstrip("_.-")
    return name or "local"


def _write(path: Path, text: str) -> str | None:
    """Create ``path`` with ``text``, never over an existing file (even one made meanwhile); why not, if not."""
    try:
        with open(path, "x", encoding="utf-8") as file:
            file.write(text)
    except FileExistsError:
        return f"{path} already exists; not overwriting it (move it away or give another PATH)"
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None


def _refuse(message: str, err: TextIO) -> int:
    print(f"pdtui init: {message}", file=err)
    return EXIT_USAGE


def _report(path: Path, draft: Draft, out: TextIO) -> None:
    """The file written, each service in one line, and the next steps."""
    quoted = shlex.quote(str(path))
    print(f"pdtui init: wrote {path}", file=out)
    for svc in draft.services:
        print(f"  {_summary(svc)}", file=out)
    if draft.placeholder_gpus:
        print("  nvidia-smi was not found: the GPUs in it are an example, set them", file=out)
    print(f"next: pdtui check {quoted} --probe    (checks this machine against it; starts nothing)", file=out)
    print(f"then: pdtui up {quoted}", file=out)


def _summary(svc: ServiceDraft) -> str:
    unit = f"{svc.unit} ({'found' if svc.found else 'to create'})"
    where = [f"GPUs {gpu_ranges(svc.gpus)}"] if svc.gpus else []
    where += [f"NUMA {svc.numa}"] if svc.numa is not None else []
    return f"{svc.role:<8} {unit:<36} {'  '.join([*where, f':{svc.port}'])}"

