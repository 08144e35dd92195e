"""``pdtui units CONFIG``: the systemd units of the deployment, generated from its config.

Printed by default; ``--out DIR`` writes one ``<unit>.service`` per service;
``--diff`` compares them with the installed ones (``systemctl cat``) on each
host; ``--install`` writes them there, through the same connection the
bring-up uses. A service that runs as a Slurm job has its job script printed
(or written) instead: it is made and submitted by the bring-up itself, with a
router's backends named by the nodes Slurm gives them.

An install is atomic per file (a temporary file renamed over the unit), keeps
a backup of a file it replaces, runs ``systemctl daemon-reload`` once per host
and never touches a running process: a running unit keeps its old command line
until it is restarted. A unit that differs from what would be written is
replaced only with ``--yes``; without it nothing is written at all.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pdtui.config import Deployment
from pdtui.hosts.base import Host, HostError
from pdtui.support.redact import Redactor
from pdtui.support.text import inert
from pdtui.targets.slurm.script import preview_scripts
from pdtui.targets.slurm.settings import JOBS
from pdtui.targets.systemd.commands import Commands, parse_cat
from pdtui.targets.systemd.settings import hosts_of, unit_service
from pdtui.targets.systemd.unit_files import UnitFile, render_units

HostFactory = Callable[..., Host]
COMMAND_TIMEOUT = 30.0
LINE_LIMIT = 64 * 1024     # a line of a diff printed whole up to here (a unit's longest ExecStart= fits)
_VERSION = re.compile(r"^systemd (\d+)", re.MULTILINE)
SECRET_MASK = "<secret>"


def install_argv(sudo: bool, *argv: str) -> list[str]:
    """One fixed command of an install, as root when the host says ``sudo: true``: ``sudo -n`` then the command
    itself, never a shell, so a sudoers line can name exactly these (README: "Installing units with sudo")."""
    return [*(("sudo", "-n") if sudo else ()), *argv]


def print_units(units: list[UnitFile], redactor: Redactor) -> None:
    """Each unit (and its secrets' file, masked) on stdout; a secret anywhere in them is masked too."""
    for index, unit in enumerate(units):
        if index:
            print()
        print(f"# ---- {unit.name} on {unit.host} " + "-" * max(0, 60 - len(unit.name) - len(unit.host)))
        print(redactor.redact(unit.text), end="")
        if unit.secrets:
            print(f"# ---- {unit.secret_path} on {unit.host} (0600, its secrets; written by --install, --out) ----")
            print("".join(f"{key}={SECRET_MASK}\n" for key, _ in unit.secrets), end="")


def shared_folder(out: Path) -> str | None:
    """Why ``out`` is no place for units and secrets, or None: a folder others may write without the sticky bit
    lets them rename a file pdtui made there, or put their own link in its place before it is renamed over its name
    (checked where it leads; one not made yet is made by pdtui, 0755 under the umask)."""
    try:
        mode = out.stat().st_mode
    except FileNotFoundError:
        return None
    if mode & 0o002 and not mode & 0o1000:
        return f"others may write that folder (mode {mode & 0o7777:04o}) and rename what is written there"
    return None


def write_units(units: list[UnitFile], out: Path) -> list[Path]:
    """Each unit to ``out/<unit>`` (0644), its secrets to ``out/<unit>.env`` (0600) and a job script (it may hold
    secrets) 0700; each atomically: a temporary file, made 0600 by mkstemp, renamed over its name."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in units:
        mode = 0o700 if unit.name.endswith(".sbatch") else 0o644
        written.append(_write_file(out / unit.name, unit.text, mode))
        if unit.secrets:
            written.append(_write_file(out / PurePosixPath(unit.secret_path).name, unit.secret_text, 0o600))
    return written


def _write_file(path: Path, text: str, mode: int) -> Path:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as file:
        file.write(text)
        os.fchmod(fd, mode)     # the file made, never its name: another user of a shared folder may swap the name
    os.replace(tmp, path)
    return path


@dataclass
class Installed:
    """A host's view: its systemd version and the unit files it has now."""

    systemd: int | None
    files: dict[str, tuple[str, str]]     # unit -> (path, text) of its unit file (drop-ins aside)


async def look(host: Host, commands: Commands, units: list[str]) -> Installed:
    """``systemctl --version`` and ``systemctl cat`` of the units (a missing one is simply absent)."""
    version = await host.run(commands.systemctl("--version"), timeout=COMMAND_TIMEOUT)
    cat = await host.run(commands.cat(units), timeout=COMMAND_TIMEOUT)
    match = _VERSION.search(version.stdout)
    found = {unit: files[0] for unit, files in parse_cat(cat.stdout).items() if files}
    if not cat.ok and not found and "No files found" not in cat.stderr:
        raise HostError(f"{host.name}: systemctl cat failed: {inert(cat.last_words)}")
    return Installed(int(match.group(1)) if match else None, found)


def unified_diff(unit: UnitFile, installed: tuple[str, str] | None, source: str) -> str:
    path, text = installed if installed else (f"{unit.name} (not installed)", "")
    return "".join(difflib.unified_diff(text.splitlines(keepends=True), unit.text.splitlines(keepends=True),
                                        fromfile=f"{unit.host}:{path}", tofile=f"{unit.name} from {source}"))


@dataclass
class _Target:
    name: str
    host: Host
    commands: Commands
    units: list[str]


@asynccontextmanager
async def _targets(deployment: Deployment, factory: HostFactory) -> AsyncIterator[list[_Target]]:
    """Every host with units to generate, connected (one connection each) and closed after."""
    by_host: dict[str, list[str]] = {}
    for svc in deployment.services.values():
        if svc.launch is not None and (unit := unit_service(svc).unit) is not None:
            by_host.setdefault(svc.host, []).append(unit)
    hosts = hosts_of(deployment)
    targets = [_Target(name, factory(hosts[name]), Commands.for_host(hosts[name]), units)
               for name, units in by_host.items()]
    try:
        yield targets
    finally:
        for target in targets:
            await target.host.close()


async def _plan(deployment: Deployment, target: _Target) -> list[tuple[UnitFile, tuple[str, str] | None]]:
    """Each generated unit of the host (for its systemd version) beside its installed file, if any."""
    installed = await look(target.host, target.commands, target.units)
    versions = {target.name: installed.systemd} if installed.systemd else None
    return [(u, installed.files.get(u.name)) for u in render_units(deployment, systemd_versions=versions)
            if u.host == target.name]


async def diff(deployment: Deployment, factory: HostFactory) -> int:
    """Print a unified diff per unit that differs; exit 1 when any does (as diff does)."""
    async with _targets(deployment, factory) as targets:
        plans = await asyncio.gather(*(_plan(deployment, t) for t in targets))
    diffs = [unified_diff(u, old, deployment.source) for pairs in plans for u, old in pairs if _differs(u, old)]
    for text in diffs:     # the installed side is the host's text: inert, and a secret in it masked
        for line in text.splitlines():
            print(inert(deployment.redactor.redact(line), limit=LINE_LIMIT))
    if not diffs:
        print("every installed unit is as generated")
    return 1 if diffs else 0


def _differs(unit: UnitFile, installed: tuple[str, str] | None) -> bool:
    return installed is None or installed[1].rstrip("\n") != unit.text.rstrip("\n")


async def install(deployment: Deployment, factory: HostFactory, *, yes: bool) -> int:
    """Write every generated unit on its host; refuse it all when one differs and ``yes`` is not given."""
    async with _targets(deployment, factory) as targets:
        plans = await asyncio.gather(*(_plan(deployment, t) for t in targets))
        refused = [(u, old) for pairs in plans for u, old in pairs if old is not None and _differs(u, old)]
        if refused and not yes:
            for unit, old in refused:
                print(f"{unit.host}: {unit.name} differs from the installed {inert(old[0])} (pdtui units "
                      f"{shlex.quote(inert(deployment.source))} --diff shows how); not replaced: --yes replaces it",
                      file=sys.stderr)
            print("nothing written", file=sys.stderr)
            return 1
        results = await asyncio.gather(*(_write_host(deployment, t, pairs) for t, pairs in zip(targets, plans, strict=False)))
    return 0 if all(code == 0 for code in results) else 1


async def _write_host(deployment: Deployment, target: _Target,
                      pairs: list[tuple[UnitFile, tuple[str, str] | None]]) -> int:
    """Write the host's units that changed, and the secrets' file of every unit that has secrets; then
    ``daemon-reload`` once. A file's content goes on the command's stdin, never on a command line."""
    name, host, commands = target.name, target.host, target.commands
    config = hosts_of(deployment)[name]
    backup = time.strftime("pdtui-backup-%Y%m%d-%H%M%S")
    changed = False
    for unit, old in pairs:
        if unit.secrets and not await _write_secrets(host, commands.sudo, config.secret_dir, unit):
            return 1
        if old is not None and not _differs(unit, old):
            print(f"{name}: {unit.name} unchanged")
            continue
        if not await _write_unit(host, commands.sudo, config.unit_dir, unit, old, backup):
            return 1
        changed = True
        kept = f" (the old one kept as {unit.name}.{backup})" if old is not None else ""
        print(f"{name}: wrote {config.unit_dir}/{unit.name}{kept}")
    if changed:
        reload = await host.run(commands.systemctl("daemon-reload"), timeout=COMMAND_TIMEOUT)
        if not reload.ok:
            print(f"{name}: systemctl daemon-reload failed: {inert(reload.last_words)}", file=sys.stderr)
            return 1
        print(f"{name}: systemctl daemon-reload (running units keep their command line until restarted)")
    return 0


async def _write_unit(host: Host, sudo: bool, folder: str, unit: UnitFile, old: tuple[str, str] | None,
                      backup: str) -> bool:
    """The unit file written beside its place (0644), the installed one copied as a backup, then renamed over it:
    atomic, and each step one fixed command."""
    path, tmp = f"{folder}/{unit.name}", f"{folder}/.{unit.name}.pdtui-tmp"
    steps: list[tuple[list[str], bytes | None]] = [
        (install_argv(sudo, "install", "-m", "0644", "/dev/stdin", tmp), unit.text.encode())]
    if old is not None and old[0] == path:
        steps.append((install_argv(sudo, "cp", "-p", path, f"{path}.{backup}"), None))
    steps.append((install_argv(sudo, "mv", "-f", tmp, path), None))
    return await _steps(host, f"could not write {path}", steps)


async def _write_secrets(host: Host, sudo: bool, folder: str, unit: UnitFile) -> bool:
    """The unit's secrets to its EnvironmentFile=: a 0700 folder, a 0600 file, root's when installed by sudo."""
    steps: list[tuple[list[str], bytes | None]] = [
             (install_argv(sudo, "install", "-d", "-m", "0700", folder), None),
             (install_argv(sudo, "install", "-m", "0600", "/dev/stdin", unit.secret_path), unit.secret_text.encode())]
    if not await _steps(host, f"could not write {unit.secret_path}", steps):
        return False
    print(f"{host.name}: wrote {unit.secret_path} (0600: {unit.name}'s secrets)")
    return True


async def _steps(host: Host, failure: str, steps: list[tuple[list[str], bytes | None]]) -> bool:
    """Run each command in turn (a content on its stdin); at the first that fails, say why (the host's words,
    inert) and stop."""
    for argv, content in steps:
        result = await (host.run(argv, timeout=COMMAND_TIMEOUT) if content is None
                        else host.run(argv, timeout=COMMAND_TIMEOUT, input=content))
        if not result.ok:
            print(f"{host.name}: {failure}: {inert(result.last_words)}", file=sys.stderr)
            return False
    return True


def job_files(deployment: Deployment) -> list[UnitFile]:
    """The job scripts of the services that run on a cluster, printed and written as the units are."""
    return [UnitFile(script.service, deployment.services[script.service].host, f"{script.name}.sbatch", script.text)
            for script in preview_scripts(deployment)]


def run(deployment: Deployment, *, out: str | None = None, diff_them: bool = False, install_them: bool = False,
        yes: bool = False, factory: HostFactory | None = None) -> int:
    units = render_units(deployment)
    jobs = any(svc.placement is JOBS for svc in deployment.services.values())
    if not units and (diff_them or install_them) and jobs:
        print(f"pdtui: the services of {inert(deployment.source)} run as Slurm jobs: no unit to compare or install "
              f"(pdtui units CONFIG prints their job scripts)", file=sys.stderr)
        return 1
    if not units and not jobs:
        print(f"pdtui: no service of {inert(deployment.source)} has a launch: block, so there is no unit to generate",
              file=sys.stderr)
        return 1
    if diff_them or install_them:
        assert factory is not None
        try:
            if diff_them:
                return asyncio.run(diff(deployment, factory))
            return asyncio.run(install(deployment, factory, yes=yes))
        except HostError as exc:
            print(f"pdtui: {inert(str(exc))}", file=sys.stderr)
            return 1
    units += job_files(deployment)      # a job's script is made at submission: shown, never installed
    if out is None:
        print_units(units, deployment.redactor)
        return 0
    if (shared := shared_folder(Path(out))) is not None:
        print(f"pdtui: not writing units to {inert(out)}: {shared}; name a folder only you can write", file=sys.stderr)
        return 1
    for path in write_units(units, Path(out)):
        print(f"wrote {inert(str(path))}")
    return 0
