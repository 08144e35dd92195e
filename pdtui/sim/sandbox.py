"""A sandbox: one directory holding a simulated machine's units, their state and the journal.

Tests and ``pdtui demo`` make one, add units (argv lists, typically sim
workers), and point a host config's ``commands:`` at :attr:`Sandbox.commands`
(or put :attr:`Sandbox.bin_dir` first on a PATH, e.g. for a test sshd).  On
exit every process the sandbox's units started is stopped, by PID, even after
a crash left state files behind; so is every process started beside them with
:meth:`Sandbox.spawn` (the demo's load generator).

With a real journal (``real_journal``, see :mod:`pdtui.sim.realjournal`) the
sandbox runs one systemd-journal-remote, the sim's entries also go to its journal
file and the sandbox's ``journalctl`` is the machine's own, reading only that
directory (``--directory``). :meth:`Sandbox.stop_all` stops it too, last.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from pdtui.sim import nvidia_smi, realjournal
from pdtui.sim.journal import Journal, pid1_boot_entry
from pdtui.sim.procs import ProcId, running_with, terminate
from pdtui.sim.python import sim_python
from pdtui.sim.sysfs import FabricShape, write_tree
from pdtui.sim.systemctl import ROOT_ENV, package_env
from pdtui.sim.unit_store import UnitStore, render_unit, unit_name

STOP_GRACE = 3.0
TOOLS = {"systemctl": "pdtui.sim.systemctl", "journalctl": "pdtui.sim.journalctl",
         "nvidia-smi": "pdtui.sim.nvidia_smi"}


class Sandbox:
    """The simulated machine under :attr:`root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.store = UnitStore(self.root)
        self.children: list[subprocess.Popen[bytes]] = []   # what this instance spawned, to reap once stopped

    @classmethod
    def create(cls, path: str | Path | None = None, real_journal: bool | None = None) -> Sandbox:
        """Make the directory layout under ``path`` (a new temporary directory if None).

        ``real_journal``: also log into real journal files, read with the real
        journalctl (None: as :func:`pdtui.sim.realjournal.wanted` decides).
        """
        if real_journal and not realjournal.available():
            raise RuntimeError(f"no real journal: {realjournal.missing_reason()}")
        root = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="pdtui-sim-"))
        for sub in ("units", "state", "journal", "enabled"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        sandbox = cls(root.resolve())
        if realjournal.wanted(real_journal) and realjournal.available():
            realjournal.real_dir(sandbox.root).mkdir(exist_ok=True)
            realjournal.ensure_remote(sandbox.root)
        sandbox._write_wrappers()
        sandbox._first_entry()
        return sandbox

    @property
    def real_journal(self) -> bool:
        return realjournal.enabled(self.root)

    @property
    def journal_kind(self) -> str:
        """Which journal the sandbox's journalctl reads, in words."""
        if self.real_journal:
            return "the real one (systemd-journal-remote writes it, the machine's journalctl reads it)"
        return "the sim's stand-in journalctl (systemd-journal-remote is not installed, or PDTUI_SIM_REAL_JOURNAL=0)"

    def _first_entry(self) -> None:
        """systemd's first line: ``journalctl -f`` exits at once on a journal with no entry of this boot."""
        journal = Journal(self.root, writer_name="boot")
        try:
            journal.append([pid1_boot_entry()])
        finally:
            journal.close()

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def sysfs(self) -> Path:
        """A sysfs tree of a GPU box whose fabric is healthy (one active NIC per NUMA node, nvidia_peermem loaded),
        for a host config's ``sysfs:``; this machine's own /sys has no RDMA device."""
        root = self.root / "sys"
        return root if root.exists() else write_tree(root, FabricShape())

    @property
    def commands(self) -> dict[str, list[str]]:
        """argv prefixes that run this sandbox's ``systemctl``, ``journalctl`` and ``nvidia-smi``.

        ``env`` gives them the PYTHONPATH that ``python -S`` needs to find pdtui.
        """
        commands = {tool: self.sim_command(tool) for tool in TOOLS}
        if self.real_journal:
            commands["journalctl"] = self.real_journalctl()
        return commands

    def sim_command(self, tool: str) -> list[str]:
        """argv of the sim's own ``tool`` (its journalctl stand-in even when the real journal is on)."""
        pythonpath = f"PYTHONPATH={package_env()['PYTHONPATH']}"
        return ["env", pythonpath, *sim_python(TOOLS[tool]), "--root", str(self.root)]

    def real_journalctl(self) -> list[str]:
        """The machine's journalctl, reading this sandbox's real journal files only."""
        return [realjournal.journalctl() or "journalctl", f"--directory={realjournal.real_dir(self.root)}"]

    def _write_wrappers(self) -> None:
        """Shell wrappers in ROOT/bin, usable from any cwd and any login (pdtui importable)."""
        self.bin_dir.mkdir(exist_ok=True)
        pythonpath = package_env()["PYTHONPATH"]
        for tool, module in TOOLS.items():
            path = self.bin_dir / tool
            if tool == "journalctl" and self.real_journal:
                path.write_text(f"#!/bin/sh\nexec {shlex.join(self.real_journalctl())} \"$@\"\n")
            else:
                path.write_text(
                    "#!/bin/sh\n"
                    f"PYTHONPATH={shlex.quote(pythonpath)}${{PYTHONPATH:+:$PYTHONPATH}} "
                    f"{ROOT_ENV}={shlex.quote(str(self.root))} "
                    f"exec {shlex.join(sim_python(module))} \"$@\"\n"
                )
            path.chmod(0o755)

    def add_unit(self, name: str, argv: list[str], description: str = "", env: dict[str, str] | None = None,
                 workdir: str | None = None, stop_timeout: float | None = None, service: Sequence[str] = ()) -> str:
        """Write the unit file for ``argv`` (``service``: more [Service] lines); returns its full name."""
        full = unit_name(name)
        self.store.units_dir.mkdir(parents=True, exist_ok=True)
        self.store.unit_path(full).write_text(render_unit(description, argv, env, workdir, stop_timeout, service))
        return full

    def set_gpu_busy(self, index: int, used_mib: int, pids: list[tuple[int, str, int]] | None = None,
                     utilization: int = 0) -> None:
        """Make GPU ``index`` show as held, by ``pids`` (pid, process name, MiB) if given."""
        nvidia_smi.set_busy(self.root, index, used_mib, pids or (), utilization)

    def rotate_journal(self, remove: bool = False) -> None:
        """Rotate the journal under its readers, as ``journalctl --rotate`` does: a new active file.

        ``remove``: and vacuum the archived file away at once (``--vacuum-files``).
        The stand-in reads its active file only; the real journalctl merges the
        archived one in, as on a host.
        """
        standin = Journal(self.root).path
        if not self.real_journal:
            self._archive(standin, standin.with_name(f"{standin.name}.1"), remove)
            return
        with realjournal.rotated(self.root) as closed:
            self._archive(standin, standin.with_name(f"{standin.name}.1"), remove)
            self._archive(closed, closed.with_name(f"{closed.stem}@{uuid.uuid4().hex}.journal"), remove)

    @staticmethod
    def _archive(path: Path, archived: Path, remove: bool) -> None:
        if remove:
            path.unlink(missing_ok=True)
        elif path.exists():
            path.rename(archived)

    def node(self, name: str) -> Sandbox:
        """Another simulated machine beside this one (``ROOT/nodes/NAME``), for a server over several nodes: its own
        units, journal and GPUs, stopped and removed with this sandbox."""
        return Sandbox.create(self.root / "nodes" / name, real_journal=self.real_journal)

    def nodes(self) -> list[Sandbox]:
        """The machines :meth:`node` made beside this one."""
        return [Sandbox(path) for path in sorted((self.root / "nodes").glob("*")) if path.is_dir()]

    @property
    def spawned_dir(self) -> Path:
        return self.root / "spawned"

    def spawn(self, name: str, argv: list[str]) -> ProcId:
        """Start ``argv`` beside the units: in a session of its own (a Ctrl-C at the terminal is its starter's
        to handle), pdtui importable, its output appended to ``ROOT/NAME.log``. Its PID and start time are
        recorded under ``ROOT/spawned``, so :meth:`stop_all` stops it, from this process or any other."""
        self.spawned_dir.mkdir(exist_ok=True)
        with open(self.root / f"{name}.log", "ab") as out:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                                     env=package_env())
        self.children.append(child)
        proc = ProcId.of(child.pid) or ProcId(child.pid, 0)   # start 0: it ended already, and alive() says so
        (self.spawned_dir / name).write_text(f"{proc.pid} {proc.start}\n")
        return proc

    def spawned(self) -> dict[str, ProcId]:
        """The processes :meth:`spawn` started, by name (alive or not)."""
        procs = {}
        for path in sorted(self.spawned_dir.glob("*")):
            pid, start = path.read_text().split()
            procs[path.name] = ProcId(int(pid), int(start))
        return procs

    def stop_all(self, grace: float | None = None) -> None:
        """Stop what :meth:`spawn` started, then every unit's supervisor and child, by PID, and wait until they
        are gone; then journal-remote.

        Each unit's start/stop lock is taken first: a ``systemctl start`` still
        spawning (its caller interrupted a moment ago) finishes recording its
        supervisor before this reads the record.

        ``grace``: how long each process has after its SIGTERM before SIGKILL. None gives a unit its stop timeout
        and :data:`STOP_GRACE` more, as a machine's orderly shutdown does; a test's end gives less, since no one
        waits there for a server to drain (smg keeps its listener open 5 s after a SIGTERM for load balancers).
        """
        for proc in self.spawned().values():
            terminate(proc, STOP_GRACE if grace is None else grace, group=True)
        for child in self.children:
            child.poll()     # reaped: no zombie left behind
        names = sorted({*self.store.names(), *self.store.started_names()})
        if names:   # side by side, as systemd stops independent units: each waits its own stop
            with ThreadPoolExecutor(max_workers=len(names)) as pool:
                list(pool.map(lambda name: self._stop_locked(name, grace), names))
        for stray in self._unrecorded_supervisors():
            terminate(stray, STOP_GRACE + 3.0 if grace is None else grace)      # it stops its unit's process as it goes
        for node in self.nodes():
            node.stop_all(grace)
        realjournal.stop_remote(self.root)   # last: once the supervisors' last lines are in

    def _unrecorded_supervisors(self) -> list[ProcId]:
        """Supervisors of this sandbox that no state file names.

        A ``systemctl start`` ended (Ctrl-C, or SIGKILL as a cancelled command
        gets) between spawning its supervisor and recording it leaves one; it is
        found by its command line, which names this sandbox's root. Linux shows
        a command line only once the exec is done: one spawned within that
        moment before this runs is missed (a known limit).
        """
        return running_with(f"pdtui.sim.supervisor\0--root\0{self.root}\0".encode())

    def _stop_locked(self, name: str, grace: float | None) -> None:
        with self.store.lock(name):
            self._stop_unit(name, grace)

    def _stop_unit(self, name: str, grace: float | None) -> None:
        state = self.store.read_state(name)
        supervisor, child = state.supervisor_proc(), state.child_proc()
        if grace is None:
            unit = self.store.load(name)
            grace = (unit.stop_timeout if unit else 0.0) + STOP_GRACE
        if supervisor is not None and supervisor.alive():
            terminate(supervisor, grace)
            child = self.store.read_state(name).child_proc() or child   # one it spawned meanwhile
        if child is not None and child.alive():
            terminate(child, grace, group=True)

    def cleanup(self, grace: float | None = None) -> None:
        """Stop everything (``grace`` as :meth:`stop_all` takes it) and remove the sandbox directory."""
        self.stop_all(grace)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cleanup()
