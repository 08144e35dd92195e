"""A private one-node Slurm cluster of this machine: what pdtui's Slurm tests and ``pdtui demo --slurm`` run on.

Everything lives in one folder: ``slurm.conf`` (its own ports, chosen free at
run time; state, spool, log and pid paths inside the folder), ``gres.conf``
naming eight GPUs (character devices made with mknod: slurmd refuses plain
files, and a count without files registers none), a private ``munged`` (its
own socket and key, named by ``AuthInfo=socket=``), and ``slurmctld`` and
``slurmd`` started as plain processes. Slurm's clients reach it through
``SLURM_CONF`` alone (see :attr:`PrivateCluster.commands`).

Stopping cancels every job, stops the daemons by the PIDs pdtui started, and
then stops any process still holding a file of the folder (a job's
``slurmstepd`` keeps slurmd's log open, its script runs from the spool):
nothing machine-wide is read, written or signalled. Root is needed (slurmd
runs jobs as their user, and mknod); without it, or without the programs,
:func:`unavailable` says why in one line.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from pdtui.sim.ports import free_port
from pdtui.sim.procs import ProcId, terminate

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sacct", "scontrol", "scancel", "sinfo")
CLIENTS = ("sbatch", "squeue", "sacct", "scontrol", "scancel")
SEARCH_PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"   # the daemons live in sbin, often off a user's PATH
GPUS = 8
START_TIMEOUT = 30.0
STOP_GRACE = 5.0
KILL_WAIT = 2           # seconds Slurm gives a cancelled job between SIGTERM and SIGKILL (a router needs the KILL)
CLIENT_TIMEOUT = 10.0


class ClusterUnavailable(Exception):
    """A private cluster cannot run here (not root, a program missing): one line saying why."""


class ClusterError(Exception):
    """The cluster was started and did not come up: one line naming what and where its log is."""


def program(name: str) -> str | None:
    """Where ``name`` is installed, looking in sbin too."""
    return shutil.which(name, path=SEARCH_PATH)


def unavailable() -> str | None:
    """Why a private cluster cannot run on this machine, or None when it can."""
    missing = [name for name in PROGRAMS if program(name) is None]
    if missing:
        return (f"Slurm is not installed here ({', '.join(missing)} missing): apt-get install slurmctld slurmd "
                f"slurm-client munge")
    if os.geteuid() != 0:
        return "a private Slurm cluster needs root (slurmd runs jobs as their user; its GPU files need mknod)"
    return None


def slurm_conf(root: Path, node: str, cpus: int, ports: tuple[int, int], gpus: int = GPUS,
               nodes: tuple[tuple[str, int], ...] = ()) -> str:
    """The cluster's slurm.conf: one node with ``gpus`` GPUs in one partition, everything in ``root``.

    Memory is not a consumable resource and a core may be shared by four jobs
    (a 2-core machine runs prefill, decode and router at once); GPUs are never
    shared, so a job asking for GPUs that are taken waits (Resources).

    ``nodes``: several nodes instead, each (name, slurmd port), all of them this
    machine (Slurm's multiple-slurmd: a slurmd per node, ``slurmd -N NAME``).
    """
    ctld, slurmd = ports
    each = "-%n" if nodes else ""
    lines = ([f"NodeName={name} NodeHostname={node} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} Gres=gpu:{gpus} "
              "State=UNKNOWN" for name, port in nodes] if nodes else
             [f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{gpus} State=UNKNOWN"])
    partition = ",".join(name for name, _ in nodes) if nodes else node
    return "\n".join([
        "ClusterName=pdtui",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ctld}",
        f"SlurmdPort={slurmd}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={root}/munge/munge.socket",
        "CommunicationParameters=NoInAddrAny",       # slurmd listens on its node address (127.0.0.1) only
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool{'/%n' if nodes else ''}",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd{each}.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd{each}.log",
        f"PlugStackConfig={root}/plugstack.conf",    # not the machine's /etc/slurm/plugstack.conf
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "ReturnToService=2",
        f"KillWait={KILL_WAIT}",
        *lines,
        f"PartitionName=gpu Nodes={partition} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
        "",
    ])


def gres_conf(root: Path, nodes: list[str], gpus: int = GPUS) -> str:
    """Every node's GPUs: the same device files on each (they are one machine)."""
    return "".join(f"NodeName={node} Name=gpu File={root}/dev/nvidia[0-{gpus - 1}]\n" for node in nodes)


class PrivateCluster:
    """A running private cluster in :attr:`root`; :meth:`stop` (or leaving a ``with``) ends it."""

    def __init__(self, root: Path, *, gpus: int = GPUS, nodes: int = 1, remove: bool = False) -> None:
        self.root = root
        self.gpus = gpus
        self.host = socket.gethostname().split(".")[0]
        # One node is this machine by its name; several are names of their own, each a slurmd of this machine.
        self.nodes = [self.host] if nodes == 1 else [f"node{index}" for index in range(1, nodes + 1)]
        self.node = self.nodes[0]
        self.conf = root / "slurm.conf"
        self._remove = remove
        self._daemons: list[tuple[str, subprocess.Popen[bytes]]] = []

    # -- what users of the cluster need -------------------------------------------
    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @property
    def commands(self) -> dict[str, list[str]]:
        """argv prefixes of Slurm's clients reaching this cluster (a cluster config's ``commands:``)."""
        return {name: ["env", f"SLURM_CONF={self.conf}", program(name) or name] for name in CLIENTS}

    @property
    def pids(self) -> list[int]:
        """The PIDs of the daemons it started (munged, slurmctld, slurmd), the ones :meth:`stop` ends."""
        return [proc.pid for _, proc in self._daemons]

    @property
    def jobs_dir(self) -> Path:
        """Where jobs' scripts and output files go (a cluster config's ``output_dir``)."""
        return self.root / "jobs"

    def client(self, name: str, *args: str, timeout: float = CLIENT_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """Run one of Slurm's clients against this cluster."""
        argv = [program(name) or name, *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env},
                              stdin=subprocess.DEVNULL, check=False)

    # -- start -------------------------------------------------------------------------
    @classmethod
    def start(cls, root: Path | None = None, *, gpus: int = GPUS, nodes: int = 1,
              timeout: float = START_TIMEOUT) -> PrivateCluster:
        """Make the folder (a new temporary one when ``root`` is None, removed at stop) and start the cluster
        (``nodes``: that many nodes, each a slurmd of this machine with ``gpus`` GPUs).

        Raises ClusterUnavailable when it cannot run here, ClusterError when it did not come up
        (everything started is stopped again first).
        """
        reason = unavailable()
        if reason:
            raise ClusterUnavailable(reason)
        made = root is None
        folder = Path(tempfile.mkdtemp(prefix="pdtui-slurm-")) if root is None else Path(root)
        cluster = cls(folder.resolve(), gpus=gpus, nodes=nodes, remove=made)
        try:
            cluster._lay_out()
            cluster._start_daemons(timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _lay_out(self) -> None:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)                  # munged wants its socket's folders open to all
        for sub, mode in (("state", 0o700), ("spool", 0o755), ("log", 0o755), ("run", 0o755), ("munge", 0o755),
                          ("dev", 0o755), ("jobs", 0o755)):
            (root / sub).mkdir(exist_ok=True)
            (root / sub).chmod(mode)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for index in range(self.gpus):
            device = root / "dev" / f"nvidia{index}"
            try:
                os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))   # /dev/null's numbers: harmless
            except FileExistsError:
                pass
            except OSError as exc:
                raise ClusterUnavailable(f"cannot make the GPU files of a private Slurm cluster "
                                         f"(mknod {device} c 1 3: {exc.strerror})") from None
        ports = (free_port(), free_port())
        several = tuple((name, free_port()) for name in self.nodes) if len(self.nodes) > 1 else ()
        for name, _ in several:
            (root / "spool" / name).mkdir(exist_ok=True)
        self.conf.write_text(slurm_conf(root, self.host, os.cpu_count() or 1, ports, self.gpus, several))
        (root / "gres.conf").write_text(gres_conf(root, self.nodes, self.gpus))
        (root / "plugstack.conf").write_text("")

    def _start_daemons(self, timeout: float) -> None:
        root = self.root
        self._spawn("munged", "-F", f"--socket={root}/munge/munge.socket", f"--key-file={root}/munge/munge.key",
                    f"--pid-file={root}/run/munged.pid", f"--seed-file={root}/munge/munged.seed",
                    f"--log-file={root}/log/munged.log")
        self._wait("munged", timeout, lambda: (root / "munge" / "munge.socket").exists(), "its socket")
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._wait("slurmctld", timeout, self._controller_up, "scontrol ping to answer UP")
        for node in self.nodes:
            name = "slurmd" if len(self.nodes) == 1 else f"slurmd-{node}"
            self._spawn(name, "-D", "-f", str(self.conf), *(["-N", node] if len(self.nodes) > 1 else []))
            self._wait(name, timeout, functools.partial(self._node_idle, node), f"node {node} to be idle")

    def _spawn(self, name: str, *args: str) -> None:
        path = program(name.partition("-")[0])
        assert path is not None, f"{name}: checked by unavailable()"
        with open(self.root / "log" / f"{name}.out", "wb") as out:
            proc = subprocess.Popen([path, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **self.env}, start_new_session=True)
        self._daemons.append((name, proc))

    def _wait(self, name: str, timeout: float, ready: Callable[[], bool], what: str) -> None:
        """Until ``ready()``; a ClusterError naming the daemon and its last log line when it died or never was."""
        proc = dict(self._daemons)[name]
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise ClusterError(f"{name} exited with status {proc.returncode} while starting: "
                                   f"{self._last_log(name)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} did not come up within {timeout:g}s (waited for {what}): "
                                   f"{self._last_log(name)}")
            time.sleep(0.1)

    def _last_log(self, name: str) -> str:
        """The last line of a daemon's log, or where its log is."""
        for path in (self.root / "log" / f"{name}.log", self.root / "log" / f"{name}.out"):
            try:
                lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
            except OSError:
                continue
            if lines:
                return f"{lines[-1].strip()} (log: {path})"
        return f"nothing logged (see {self.root / 'log'})"

    def _controller_up(self) -> bool:
        try:
            return "is UP" in self.client("scontrol", "ping", timeout=5).stdout
        except subprocess.TimeoutExpired:
            return False

    def _node_idle(self, node: str) -> bool:
        """The node registered and schedulable; a node that came up down or drained is resumed once."""
        try:
            state = self.client("sinfo", "-h", "-N", "-n", node, "-o", "%T", timeout=5).stdout.strip().lower()
        except subprocess.TimeoutExpired:
            return False
        if state.startswith(("down", "drain")):
            self.client("scontrol", "update", f"nodename={node}", "state=resume")
        return state == "idle"

    # -- stop --------------------------------------------------------------------------
    def cancel_all(self, timeout: float = KILL_WAIT + STOP_GRACE) -> None:
        """Cancel every job of the cluster and wait (up to ``timeout``) until Slurm lists none."""
        if not self._alive("slurmctld"):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                listed = self.client("squeue", "-h", "-o", "%i", timeout=5)
            except subprocess.TimeoutExpired:
                return
            jobs = listed.stdout.split()
            if listed.returncode != 0 or not jobs:
                return
            self.client("scancel", *jobs, timeout=5)
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancel the jobs, stop the daemons by PID, then whatever still holds the folder; remove a temporary folder."""
        try:
            self.cancel_all()
        except (OSError, subprocess.SubprocessError):
            pass
        for _, daemon in reversed(self._daemons):   # slurmd, slurmctld, then munged
            _stop(daemon)
        self._daemons.clear()
        for left in holders(self.root):
            terminate(left, STOP_GRACE)
        if self._remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def _alive(self, name: str) -> bool:
        return any(n == name and proc.poll() is None for n, proc in self._daemons)

    def __enter__(self) -> PrivateCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM a daemon pdtui started, SIGKILL when it lingers; reap it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_GRACE)


def holders(root: Path) -> list[ProcId]:
    """Live processes (this one excepted) whose command line names ``root`` or that hold a file under it open."""
    needle = str(root)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if _names(entry.name, needle.encode()) and (proc := ProcId.of(int(entry.name))) is not None:
            found.append(proc)
    return found


def _names(pid: str, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if needle in f.read():
                return True
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    root = needle.decode()
    for fd in fds:
        try:
            if _under(os.readlink(f"/proc/{pid}/fd/{fd}"), root):
                return True
        except OSError:
            continue
    return False


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


__all__ = ["ClusterError", "ClusterUnavailable", "PrivateCluster", "holders", "unavailable"]
