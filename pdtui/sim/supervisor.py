"""``python -m pdtui.sim.supervisor --root ROOT UNIT``: what PID 1 does for one start of a unit.

``systemctl start`` spawns one detached supervisor per start. It gives each run
a new InvocationID, starts ExecStart in its own process group with stdout and
stderr on one pipe, as systemd gives both one stream to journald (so a unit's
lines keep the order it wrote them in), turns every line into a journal entry
(PRIORITY 6, or a ``<N>`` prefix's level, as journald's SyslogLevelPrefix=),
writes systemd's own lines about the unit, keeps ``ROOT/state/UNIT.json``
current, gives the unit the sandbox's own temporary folder (``TMPDIR=ROOT/tmp``,
as a machine's /tmp: the ZMQ sockets and named temporary files real SGLang and
vLLM leave behind go with the sandbox, not into this machine's /tmp), runs the unit again as ``Restart=`` asks (see
:meth:`Supervisor.hold_off`), and ends with the last run. SIGTERM means
``systemctl stop``: SIGTERM to the child's group, SIGKILL after TimeoutStopSec.
"""

from __future__ import annotations

import argparse
import os
import select
import selectors
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from pdtui.sim.journal import Journal, LineEncoder, executor_entry, pid1_entry
from pdtui.sim.procs import STOP_SIGNALS, ident
from pdtui.sim.unit_store import UnitFile, UnitState, UnitStore, take_start

CLEAN_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE}
"""Signals systemd counts as a clean exit of a service's main process."""

EXIT_NAMES = {0: "SUCCESS", 1: "FAILURE", 2: "INVALIDARGUMENT", 3: "NOTIMPLEMENTED", 4: "NOPERMISSION",
              5: "NOTINSTALLED", 6: "NOTCONFIGURED", 7: "NOTRUNNING", 203: "EXEC"}
READ_SIZE = 1 << 16


class Supervisor:
    """The runs of one unit from one start: the first, and those ``Restart=`` makes, to the final state."""

    def __init__(self, store: UnitStore, unit: UnitFile, invocation: str | None = None) -> None:
        self.store = store
        self.unit = unit
        self.invocation = invocation or uuid.uuid4().hex
        self.journal = Journal(store.root, writer_name=f"{unit.name}-{self.invocation}")
        if self.journal.mirrored:
            self.journal.real_writer()     # connected (journal-remote started if none runs) before the child
        stored = store.read_state(unit.name)     # its starter's counts: NRestarts, the start limit's
        self.state = UnitState(
            active="activating", sub="start", invocation=self.invocation, n_restarts=stored.n_restarts,
            supervisor=ident(os.getpid()), active_enter_us=stored.active_enter_us, start_limit=stored.start_limit,
        )
        self.stopping = False
        self.timed_out = False
        self.kill_deadline: float | None = None
        self.child: subprocess.Popen[bytes] | None = None

    def log(self, message: str, priority: int = 6) -> None:
        self.journal.append([pid1_entry(self.unit.name, self.invocation, message, priority)])

    def save(self, **changes: object) -> None:
        for key, value in changes.items():
            setattr(self.state, key, value)
        self.store.write_state(self.unit.name, self.state)

    def spawn(self) -> bool:
        """Start ExecStart; on failure record it the way systemd does (status 203/EXEC)."""
        self.save()
        tmp = self.store.root / "tmp"
        tmp.mkdir(exist_ok=True)
        try:
            unit_env = self.unit.start_env()
        except OSError as exc:
            self._env_failed(exc)
            return False
        env = {**os.environ, "TMPDIR": str(tmp), **unit_env, "INVOCATION_ID": self.invocation}
        try:
            self.child = subprocess.Popen(
                self.unit.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                cwd=self.unit.workdir, env=env, start_new_session=True,
            )
        except OSError as exc:
            self._exec_failed(exc)
            return False
        now_us = time.time_ns() // 1000
        self.save(active="active", sub="running", main_pid=self.child.pid, child=ident(self.child.pid), since_us=now_us,
                  active_enter_us=now_us)
        self.log(f"Started {self.unit.title}.")
        return True

    def _env_failed(self, exc: OSError) -> None:
        """As systemd 252 tells it: an EnvironmentFile= it cannot read fails the start job before any process,
        with result 'resources' (the start job fails: ``systemctl start`` says so)."""
        name, reason = self.unit.name, exc.strerror or str(exc)
        for message, priority in ((f"{name}: Failed to load environment files: {reason}", 3),
                                  (f"{name}: Failed to run 'start' task: {reason}", 3),
                                  (f"{name}: Failed with result 'resources'.", 4),
                                  (f"Failed to start {self.unit.title}.", 3)):
            self.log(message, priority)
        self.save(active="failed", sub="failed", result="resources")

    def _exec_failed(self, exc: OSError) -> None:
        """As systemd 252 tells it: its executor, forked in the unit's cgroup, cannot find or run the program
        (its lines carry the unit as their own), then the manager logs the end."""
        name, program = self.unit.name, self.unit.argv[0]
        reason = exc.strerror or str(exc)
        self.log(f"Started {self.unit.title}.")
        said = [(f"{name}: Failed to locate executable {program}: {reason}", 6)] if isinstance(
            exc, FileNotFoundError) else [(f"{name}: Failed to execute {program}: {reason}", 3)]
        said.append((f"{name}: Failed at step EXEC spawning {program}: {reason}", 3))
        self.journal.append([executor_entry(name, self.invocation, os.getpid(), program, message, priority)
                             for message, priority in said])
        self.log(f"{name}: Main process exited, code=exited, status=203/EXEC", 5)
        self.log(f"{name}: Failed with result 'exit-code'.", 4)
        now_us = time.time_ns() // 1000     # Type=simple: active once forked, so it has an ActiveEnterTimestamp
        self.save(active="failed", sub="failed", exec_main_code=1, exec_main_status=203, result="exit-code",
                  since_us=now_us, active_enter_us=now_us)

    def run(self, wake_fd: int) -> None:
        """Pump the child's output into the journal until it has exited, then record how.

        ``wake_fd`` is the read end of the signal wakeup pipe: a stop request
        arrives there as the signal number, so the loop sees it as an event.
        """
        assert self.child is not None and self.child.stdout
        pump = _Pump(self.unit.name, self.invocation, self.child.pid, _comm(self.unit.argv), self.journal.mirrored)
        sel = selectors.DefaultSelector()
        os.set_blocking(self.child.stdout.fileno(), False)
        sel.register(self.child.stdout.fileno(), selectors.EVENT_READ, 6)
        sel.register(wake_fd, selectors.EVENT_READ, "signal")
        exit_fd = _pidfd(self.child.pid)
        if exit_fd is not None:
            sel.register(exit_fd, selectors.EVENT_READ, "exit")
        self._loop(sel, pump, exit_fd is None)
        self.child.wait()
        self._finish(self.child.returncode)

    def _loop(self, sel: selectors.BaseSelector, pump: _Pump, poll_exit: bool) -> None:
        assert self.child is not None
        open_pipes, exited = 1, False
        while open_pipes:
            events = sel.select(self._timeout(exited, poll_exit))
            for key, _ in events:
                if key.data == "signal":
                    self._on_signals(os.read(key.fd, 64))
                elif key.data == "exit":
                    sel.unregister(key.fd)
                    exited = self._child_exited()
                elif not pump.read(key.fd, key.data):
                    sel.unregister(key.fd)
                    open_pipes -= 1
            self.journal.append_encoded(*pump.take())
            if poll_exit and not exited and self.child.poll() is not None:
                exited = self._child_exited()
            if exited and not events:
                break   # the child is gone; only a leftover of its group holds the pipes
            self._check_kill_deadline()
        self.journal.append_encoded(*pump.flush())

    def _timeout(self, exited: bool, poll_exit: bool) -> float | None:
        if exited:
            return 0.2
        if self.kill_deadline is not None:
            return max(0.0, self.kill_deadline - time.monotonic())
        return 0.1 if poll_exit else None

    def _child_exited(self) -> bool:
        """The main process ended: end what is left of its group (systemd's KillMode=control-group)."""
        assert self.child is not None
        try:
            os.killpg(self.child.pid, signal.SIGKILL)   # unreaped, so the group id is still ours
        except (ProcessLookupError, PermissionError):
            pass
        return True

    def _on_signals(self, signums: bytes) -> None:
        if any(s in STOP_SIGNALS for s in signums) and not self.stopping:
            self._begin_stop()

    def _begin_stop(self) -> None:
        assert self.child is not None
        self.stopping = True
        self.save(active="deactivating", sub="stop-sigterm")
        self.log(f"Stopping {self.unit.title}...")
        _killpg(self.child.pid, signal.SIGTERM)
        self.kill_deadline = time.monotonic() + self.unit.stop_timeout

    def _check_kill_deadline(self) -> None:
        if self.kill_deadline is None or time.monotonic() < self.kill_deadline:
            return
        assert self.child is not None
        self.kill_deadline = None
        self.timed_out = True
        self.log(f"{self.unit.name}: State 'stop-sigterm' timed out. Killing.", 4)
        self.log(f"{self.unit.name}: Killing process {self.child.pid} ({_comm(self.unit.argv)}) with signal SIGKILL.", 4)
        _killpg(self.child.pid, signal.SIGKILL)

    def _finish(self, returncode: int) -> None:
        """Write systemd's closing lines and the final state for this exit."""
        name = self.unit.name
        if returncode >= 0:
            code, status, clean = "exited", f"{returncode}/{EXIT_NAMES.get(returncode, 'n/a')}", returncode == 0
            result = "exit-code"
        else:
            sig = signal.Signals(-returncode)
            code, status, clean = "killed", f"{sig.value}/{sig.name[3:]}", sig in CLEAN_SIGNALS
            result = "signal"
        if self.timed_out:
            clean, result = False, "timeout"
        if clean:
            self.log(f"{name}: Deactivated successfully.")
        else:
            self.log(f"{name}: Main process exited, code={code}, status={status}", 5)
            self.log(f"{name}: Failed with result '{result}'.", 4)
        if self.stopping:
            self.log(f"Stopped {self.unit.title}.")
        restart = not self.stopping and (self.unit.restart == "always" or (self.unit.restart == "on-failure" and not clean))
        final = ("activating", "auto-restart") if restart else ("inactive", "dead") if clean else ("failed", "failed")
        self.save(active=final[0], sub=final[1], main_pid=0, exec_main_code=1 if returncode >= 0 else 2,
                  exec_main_status=abs(returncode), result="success" if clean else result,
                  since_us=time.time_ns() // 1000)

    def hold_off(self, wake_fd: int) -> bool:
        """After a run ``Restart=`` restarts (SubState auto-restart): wait RestartSec, then start the unit again as
        systemd does, in a new invocation with NRestarts counted; True once the new run is up.

        A stop while waiting ends the unit (inactive). When the start limit
        refuses the restart, the unit fails, keeping the last run's Result (so
        systemd 252 says ``exit-code``, not ``start-limit-hit``).
        """
        if self.state.sub != "auto-restart":
            return False
        name, title = self.unit.name, self.unit.title
        if _stop_requested(wake_fd, self.unit.restart_sec):
            self.log(f"Stopped {title}.")
            self.save(active="inactive", sub="dead", result="success", since_us=time.time_ns() // 1000)
            return False
        self.save(n_restarts=self.state.n_restarts + 1)
        self.log(f"{name}: Scheduled restart job, restart counter is at {self.state.n_restarts}.")
        self.log(f"Stopped {title}.")
        if not take_start(self.state, self.unit):
            for message, priority in refused_lines(self.unit, self.state.result):
                self.log(message, priority)
            self.save(active="failed", sub="failed")
            return False
        self.invocation = uuid.uuid4().hex
        self.stopping, self.timed_out, self.kill_deadline = False, False, None
        self.save(active="activating", sub="start", invocation=self.invocation, exec_main_code=0, exec_main_status=0,
                  result="success")
        return self.spawn()


def refused_lines(unit: UnitFile, result: str) -> list[tuple[str, int]]:
    """What systemd logs (message, priority) when the start limit refuses a start of ``unit``; ``result`` is the
    Result it is left with."""
    return [(f"{unit.name}: Start request repeated too quickly.", 4),
            (f"{unit.name}: Failed with result '{result}'.", 4),
            (f"Failed to start {unit.title}.", 3)]


def _stop_requested(wake_fd: int, seconds: float) -> bool:
    """Whether a stop signal arrives (on the wakeup pipe) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if select.select([wake_fd], [], [], left)[0] and any(s in STOP_SIGNALS for s in os.read(wake_fd, 64)):
            return True
    return False


class _Pump:
    """Splits the child's output into lines and makes encoded journal entries of them."""

    def __init__(self, unit: str, invocation: str, pid: int, comm: str, export: bool = False) -> None:
        self.encoder = LineEncoder(unit, invocation, pid, comm, export)
        self.partial: dict[int, bytes] = {}
        self.priority: dict[int, int] = {}
        self.batch: list[bytes] = []

    def read(self, fd: int, priority: int) -> bool:
        """Read what ``fd`` has; False at end of file."""
        self.priority[fd] = priority
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return True
        if not data:
            self._emit_partial(fd)
            return False
        lines = (self.partial.pop(fd, b"") + data).split(b"\n")
        self.partial[fd] = lines.pop()
        encode = self.encoder.encode
        self.batch += [encode(line, priority) for line in lines]
        return True

    def _emit_partial(self, fd: int) -> None:
        rest = self.partial.pop(fd, b"")
        if rest:
            self.batch.append(self.encoder.encode(rest, self.priority[fd]))

    def take(self) -> tuple[list[bytes], list[bytes]]:
        """The entries made since last taken: JSON bodies, and in export format if exporting."""
        batch, self.batch = self.batch, []
        return batch, self.encoder.take_exported()

    def flush(self) -> tuple[list[bytes], list[bytes]]:
        """Everything still held, unfinished last lines included."""
        for fd in list(self.partial):
            self._emit_partial(fd)
        return self.take()


def _comm(argv: list[str]) -> str:
    return Path(argv[0]).name[:15] if argv else ""


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pdtui.sim.supervisor")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--notify-fd", type=int, default=None, help="written to and closed once the unit is up")
    parser.add_argument("--invocation", default=None, help="the invocation ID its starter assigned (else a new one)")
    parser.add_argument("unit")
    args = parser.parse_args(argv)
    wake_fd = _catch_stop_signals()
    store = UnitStore(args.root)
    unit = store.load(args.unit)
    if unit is None:
        print(f"Unit {args.unit} not found.", file=sys.stderr)
        return 1
    supervisor = Supervisor(store, unit, args.invocation)
    try:
        started = supervisor.spawn()
        _notify(args.notify_fd)
        while started:
            supervisor.run(wake_fd)
            started = supervisor.hold_off(wake_fd)
    except BaseException:
        if supervisor.child is not None:      # nobody would supervise it: it ends with its supervisor
            _killpg(supervisor.child.pid, signal.SIGKILL)
        raise
    finally:
        supervisor.journal.close()   # with a real journal: its connection to journal-remote ends
    return 0


def _catch_stop_signals() -> int:
    """Route SIGTERM/SIGINT to a pipe from the start, so a stop racing the spawn is not lost."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda *_: None)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return wake_r


def _notify(fd: int | None) -> None:
    """Tell the starting systemctl the unit is up; one that gave up waiting (Ctrl-C) changes nothing."""
    if fd is None:
        return
    try:
        os.write(fd, b"1")
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)


if __name__ == "__main__":
    raise SystemExit(main())
