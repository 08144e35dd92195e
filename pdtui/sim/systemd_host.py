"""A real systemd 252 with a real journald, booted in a container and reached over real SSH.

The stand-ins (sim/systemctl.py, sim/journalctl.py) serve ``pdtui demo`` without
root; this is the real manager they must agree with. It boots this machine's
own OS read-only under a throw-away overlay (``systemd-nspawn --volatile=overlay``),
in a private mount namespace and a cgroup of its own, so nothing it does reaches
the machine's files or its other processes: the container's systemd manages only
its own subtree and has its own /tmp. Its boot target pulls in basic.target and
an sshd on 127.0.0.1 at a free port, nothing else (the container shares the
machine's network: the default target would start the machine's own services).
Every boot binds in the interpreter that runs pdtui (:func:`interpreter_binds`):
units name it as their ExecStart, whoever boots the container.

Only this way, never another: systemd booted on the machine's own root, or in a
bare namespace, empties every temporary folder at boot.

Needs root, ``systemd-nspawn`` (Debian's ``systemd-container``), OpenSSH's sshd
and the hybrid cgroup layout (v1 controllers with the unified hierarchy beside
them); :func:`missing_reason` says which is missing. Stopped by SIGTERM to
nspawn (the container powers off), or SIGKILL to the container's PID 1 when it
does not; never SIGKILL to nspawn itself, which would leave its overlay behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from itertools import count
from pathlib import Path
from urllib.parse import unquote, urlparse

import asyncssh

from pdtui.sim import netns
from pdtui.sim.ports import free_port
from pdtui.sim.sshd import public_line, write_key

NSPAWN = "/usr/bin/systemd-nspawn"
SSHD = "/usr/sbin/sshd"
CGROUP = Path("/sys/fs/cgroup")
HYBRID = ("systemd", "unified")        # the named v1 hierarchy systemd uses, and the unified (v2) one beside it
TARGET = "pdtui-test.target"
SSHD_UNIT = "pdtui-sshd.service"
CONFIG_DIR = "/etc/pdtui-sshd"
SOURCE = Path(__file__).resolve().parents[2]     # the folder pdtui is imported from
# Folders this machine's shells write at every start, each given a private empty tmpfs in the container: through
# the overlay the container's shells would see the machine's own shells' lock files there come and go, and a
# shell that sees a stale one waits (pyenv's rehash, run by root's ~/.bashrc here, waits 60 s for its lock).
PRIVATE = ("/root/.pyenv/shims",)
# Folders the container mounts afresh (its systemd's /tmp, /run; nspawn's /dev/shm): the machine's are not seen there.
CONTAINER_OWN = ("/tmp", "/var/tmp", "/run", "/dev/shm")
BOOT_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# Timers would run the machine's apt, man-db and tmpfiles jobs inside: nothing a test wants beside its units.
MASKED = ("systemd-machine-id-commit.service", "timers.target")

_names = count()


def missing_reason() -> str | None:
    """Why a container cannot be booted here, or None when it can."""
    if os.geteuid() != 0:
        return "booting systemd in a container needs root"
    if not os.access(NSPAWN, os.X_OK):
        return "systemd-nspawn is not installed (apt-get install --no-install-recommends systemd-container)"
    if not os.access(SSHD, os.X_OK):
        return "OpenSSH's sshd is not installed (apt-get install openssh-server)"
    if shutil.which("nsenter") is None or shutil.which("unshare") is None:
        return "nsenter and unshare (util-linux) are not installed"
    layout = cgroup_layout()
    if layout != "hybrid":
        return (f"this machine's cgroup layout is {layout}: the container recipe is measured on the hybrid layout "
                f"(v1 controllers with {CGROUP / 'unified'}) only")
    return None


def available() -> bool:
    return missing_reason() is None


def cgroup_layout() -> str:
    """``hybrid`` (v1 with the unified hierarchy beside), ``unified`` (pure v2), ``legacy`` (v1 alone) or ``none``."""
    mounts = {fields[1]: fields[2] for fields in (line.split() for line in Path("/proc/mounts").read_text().splitlines())
              if len(fields) > 2}
    if mounts.get(str(CGROUP)) == "cgroup2":
        return "unified"
    if mounts.get(str(CGROUP / "systemd")) == "cgroup":
        return "hybrid" if mounts.get(str(CGROUP / "unified")) == "cgroup2" else "legacy"
    return "none"


@dataclass
class SystemdHost:
    """One booted container: where its sshd listens, the keys to reach it, and how to stop it."""

    name: str
    folder: Path
    port: int
    host_key: asyncssh.SSHKey
    client_key: asyncssh.SSHKey
    nspawn: subprocess.Popen = field(repr=False)
    pid1: int = 0
    cgroups: tuple[Path, ...] = ()

    @property
    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {public_line(self.host_key)}\n"

    def console(self) -> str:
        """What the container printed on its console (the boot, and its shutdown)."""
        return (self.folder / "console.log").read_text(errors="replace")

    def run(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """A command inside the container (its namespaces, its systemd and journal), for a test's own look."""
        return subprocess.run(["nsenter", "-t", str(self.pid1), "-a", *argv], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    @contextmanager
    def network(self) -> Iterator[None]:
        """The calling thread inside the container's network namespace, and back after (a container booted with
        ``private_network``: its sshd and servers are reached on its own loopback). Sockets and processes the
        thread makes meanwhile belong to that namespace; those made before keep theirs."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            netns.enter(f"/proc/{self.pid1}/ns/net")
            try:
                yield
            finally:
                netns.setns(own)
        finally:
            os.close(own)

    def stop(self) -> None:
        """Power the container off, and remove its cgroups: no process, cgroup or mount is left."""
        try:
            if self.nspawn.poll() is None:
                self.nspawn.send_signal(signal.SIGTERM)
                try:
                    self.nspawn.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    if self.pid1:
                        _kill(self.pid1)      # never nspawn itself: it removes the overlay when its child ends
                    self.nspawn.wait(STOP_TIMEOUT)
        finally:
            _clean_up(self.folder, self.cgroups)


def boot(folder: Path, *, client_key: asyncssh.SSHKey | None = None, timeout: float = BOOT_TIMEOUT,
         private_network: bool = False, binds: Mapping[str, Path] | None = None) -> SystemdHost:
    """Boot a container whose sshd trusts ``client_key`` (default: a fresh one); back once its systemd says
    ``running``.

    ``private_network``: the container gets a network namespace of its own, loopback only (for servers that bind
    every address, as real SGLang's torch store and Mooncake do); it is then reached from inside that namespace
    (:meth:`SystemdHost.network`). ``binds``: more folders bound read-only, by where they appear inside, beside
    the interpreter that runs pdtui (:func:`interpreter_binds`).
    """
    reason = missing_reason()
    if reason:
        raise RuntimeError(reason)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"pdtui{os.getpid()}n{next(_names)}"
    port = free_port()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = client_key or asyncssh.generate_private_key("ssh-ed25519")
    binds = {**_files(folder, name, port, host_key, client_key), **interpreter_binds(), **(binds or {})}
    cgroups = tuple(CGROUP / hierarchy / name for hierarchy in HYBRID)
    (folder / "root").mkdir()
    try:
        for cgroup in cgroups:
            cgroup.mkdir()
        script = _boot_script(folder / "root", cgroups, name, binds, private_network)
        with (folder / "console.log").open("wb") as console:
            nspawn = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
                                      stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT)
    except BaseException:
        _clean_up(folder, cgroups)
        raise
    host = SystemdHost(name, folder, port, host_key, client_key, nspawn, cgroups=cgroups)
    try:
        host.pid1 = _container_pid1(nspawn, timeout)
        _until_running(host, time.monotonic() + timeout)
    except BaseException:
        host.stop()
        raise
    return host


def interpreter_binds() -> dict[str, Path]:
    """The interpreter that runs pdtui, bound read-only where the container would not see it (a venv made under
    /tmp, a Python on another disk): the units pdtui's tests and benches make name ``sys.executable`` as
    their ExecStart, and one the container cannot find fails with 203/EXEC. :func:`boot` binds these always."""
    return unshared(interpreter_paths())


def interpreter_paths() -> list[str]:
    """Where the running interpreter and its pdtui are: the executable as named and as resolved (a venv's python
    links to its base interpreter's), the venv's prefix, the base installation (its standard library), the folder
    pdtui is imported from, and the checkout an editable install of pdtui names (where a unit's ``import pdtui``
    goes without a PYTHONPATH)."""
    executable = [sys.executable, os.path.realpath(sys.executable)] if sys.executable else []
    checkout = editable_checkout(_direct_url())
    return [*executable, sys.prefix, sys.base_prefix, str(SOURCE), *([checkout] if checkout else [])]


def editable_checkout(direct_url: str | None) -> str | None:
    """The folder an editable install was made from, read from its PEP 610 record (``direct_url.json``); None for
    an install that is not editable, or not from a local folder."""
    try:
        record = json.loads(direct_url or "{}")
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("dir_info"), dict):
        return None
    url = urlparse(str(record.get("url", "")))
    if url.scheme != "file" or record["dir_info"].get("editable") is not True:
        return None
    return unquote(url.path) or None


def _direct_url() -> str | None:
    """The installed pdtui's PEP 610 record, as the running interpreter finds it first on its path."""
    try:
        return metadata.distribution("pdtui").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None


def unshared(paths: Iterable[str], device: Callable[[str], int | None] | None = None) -> dict[str, Path]:
    """Those of ``paths`` the container would not see, each to be bound where it is: the container's root is the
    machine's ``/`` alone, without the file systems mounted below it (a venv made on another disk, a checkout in a
    mounted home), and with folders of its own (a venv in /tmp). One inside another bound is left out: the outer
    bind shows it, where a bind of its own would replace a venv's link to its interpreter with the file linked to.
    ``device``: a path's file system (None where there is no such path)."""
    device = device or _device
    root = device("/")
    chosen = [path for path in dict.fromkeys(paths)
              if (found := device(path)) is not None and (found != root or _in_its_own(path))]
    return {path: Path(path) for path in chosen if not any(_below(path, outer) for outer in chosen)}


def _in_its_own(path: str) -> bool:
    return any(path == folder or _below(path, folder) for folder in CONTAINER_OWN)


def _below(path: str, folder: str) -> bool:
    """Whether ``path`` lies inside ``folder`` (and is not it)."""
    return path.startswith(folder.rstrip("/") + "/") and path != folder


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def _files(folder: Path, name: str, port: int, host_key: asyncssh.SSHKey,
           client_key: asyncssh.SSHKey) -> dict[str, Path]:
    """The files bound read-only into the container, by where they appear there."""
    config = folder / "sshd"
    config.mkdir(exist_ok=True)
    write_key(config / "host_key", host_key)
    (config / "authorized_keys").write_text(public_line(client_key) + "\n")
    (config / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {CONFIG_DIR}/host_key\n"
        f"AuthorizedKeysFile {CONFIG_DIR}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPidFile none\nStrictModes no\n"
        "UseDNS no\nPrintMotd no\nAllowTcpForwarding yes\nMaxSessions 64\nLogLevel VERBOSE\n")
    (folder / SSHD_UNIT).write_text(
        "[Unit]\nDescription=sshd of pdtui's test host\n\n[Service]\nType=notify\n"
        f"ExecStart={SSHD} -D -f {CONFIG_DIR}/sshd_config\nRuntimeDirectory=sshd\n")
    (folder / TARGET).write_text(
        "[Unit]\nDescription=pdtui's test host\nRequires=basic.target\n"
        f"Wants={SSHD_UNIT}\nAfter=basic.target {SSHD_UNIT}\nAllowIsolate=yes\n")
    machine_id = subprocess.run(["systemd-id128", "new"], capture_output=True, text=True, check=True).stdout
    (folder / "machine-id").write_text(machine_id)
    (folder / "hostname").write_text(name + "\n")
    return {CONFIG_DIR: config, "/etc/machine-id": folder / "machine-id", "/etc/hostname": folder / "hostname",
            f"/etc/systemd/system/{SSHD_UNIT}": folder / SSHD_UNIT,
            f"/etc/systemd/system/{TARGET}": folder / TARGET}


def _boot_script(root: Path, cgroups: tuple[Path, ...], name: str, binds: dict[str, Path],
                 private_network: bool) -> str:
    """The shell that, in its private mount namespace, binds / read-only, enters its cgroups and becomes nspawn."""
    argv = [NSPAWN, "--quiet", "--register=no", "--keep-unit", "-M", name, "-D", str(root), "--volatile=overlay",
            *(["--private-network"] if private_network else []),
            "--link-journal=no", "--console=read-only", "--resolv-conf=off", "--timezone=off",
            *(f"--bind-ro={source}:{target}" for target, source in binds.items()),
            *(f"--tmpfs={folder}" for folder in PRIVATE if os.path.isdir(folder)),
            "-b", "--", f"systemd.unit={TARGET}", *(f"systemd.mask={unit}" for unit in MASKED)]
    enter = "; ".join(f"echo $$ > {cgroup}/cgroup.procs" for cgroup in cgroups)
    return f"set -e; mount -o bind,ro / {root}; {enter}; exec {' '.join(map(_shell_word, argv))}"


def _shell_word(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _container_pid1(nspawn: subprocess.Popen, timeout: float) -> int:
    """nspawn's child whose name is ``systemd`` (a short-lived helper child comes first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if nspawn.poll() is not None:
            raise RuntimeError(f"systemd-nspawn exited ({nspawn.returncode}) before the container booted")
        for child in _children(nspawn.pid):
            if _comm(child) == "systemd":
                return child
        time.sleep(0.02)
    raise RuntimeError(f"the container's systemd did not appear within {timeout:g}s")


def _until_running(host: SystemdHost, deadline: float) -> None:
    state = ""
    while time.monotonic() < deadline:
        state = host.run("systemctl", "is-system-running").stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the container's systemd is still {state or 'silent'} after {BOOT_TIMEOUT:g}s:\n"
                       f"{host.console()[-2000:]}")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _clean_up(folder: Path, cgroups: tuple[Path, ...]) -> None:
    for cgroup in cgroups:
        _remove_cgroup(cgroup)
    root = folder / "root"
    if root.exists():
        root.rmdir()


def _remove_cgroup(cgroup: Path) -> None:
    """Depth first: nspawn leaves ``payload/`` and ``supervisor/`` inside, each empty once the container is gone.

    A process still in the subtree (the container did not end cleanly) is one this module started: it is killed,
    so that no process outlives its container.
    """
    if not cgroup.exists():
        return
    folders = sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for _ in range(50):
        try:
            for each in [*folders, cgroup]:
                if each.exists():
                    each.rmdir()
            return
        except OSError:
            for each in [*folders, cgroup]:
                for pid in _procs(each):
                    _kill(pid)
            time.sleep(0.1)
    raise RuntimeError(f"{cgroup}: processes left in the container's cgroup")


def _procs(cgroup: Path) -> list[int]:
    try:
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    except OSError:
        return []
