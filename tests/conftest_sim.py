"""Helpers for the sim's tests: processes stopped by PID, tiny HTTP calls, bounded waits."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pdtui.sim.bootstrap import BootstrapServer
from pdtui.sim.ports import free_port
from pdtui.sim.procs import running_with
from pdtui.sim.sandbox import Sandbox
from pdtui.sim.systemctl import package_env
from pdtui.sim.unit_store import UnitStore

WAIT = 20.0
TEARDOWN_GRACE = 0.5
"""What a test's end gives each process it left running after SIGTERM: nothing is read from them any more, and a
real router's drain on SIGTERM (smg's 5 s), or a follower rank's wait for rank 0's word, would otherwise be waited
out by each test that ran one."""


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def assert_nothing_left(sandbox: Path) -> None:
    """Every supervisor and unit process of the sandbox is gone, and what it spawned beside them (the demo's
    load); no command still runs on it."""
    store = UnitStore(sandbox)
    for name in store.started_names():
        state = store.read_state(name)
        for proc in (state.supervisor_proc(), state.child_proc()):
            assert proc is None or not proc.alive(), f"{name}: PID {proc.pid} still runs"
    for name, proc in Sandbox(sandbox).spawned().items():
        assert not proc.alive(), f"{name}: PID {proc.pid} still runs"
    left = running_with(str(sandbox).encode())
    assert not left, f"still running on {sandbox}: {left}"


def wait_until(check: Callable[[], Any], timeout: float = WAIT, interval: float = 0.02) -> Any:
    """Poll ``check`` until it returns something truthy; fail the test if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s: {check}")
        time.sleep(interval)


def fetch(url: str, method: str = "GET", body: Any = None, timeout: float = 10.0,
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One HTTP request; (0, b"") when nothing listens."""
    host_port, _, path = url.removeprefix("http://").partition("/")
    host, _, port = host_port.partition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        sent = {**({"Content-Type": "application/json"} if data else {}), **(headers or {})}
        conn.request(method, "/" + path, body=data, headers=sent)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (ConnectionError, OSError):
        return 0, b""
    finally:
        conn.close()


def status(url: str) -> int:
    return fetch(url, timeout=2.0)[0]


class Procs:
    """Processes a test started; all stopped by PID at teardown (also when the test failed)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[str]:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        proc = subprocess.Popen(argv, text=True, env=package_env(), start_new_session=True, **kwargs)
        self.started.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[str], sig: int = signal.SIGTERM, grace: float = 5.0) -> int:
        """Signal ``proc``'s group, wait ``grace`` seconds, SIGKILL if it lingers; its exit status."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        return proc.returncode

    def stop_all(self) -> None:
        """The test's end: each process still running stopped, given :data:`TEARDOWN_GRACE`."""
        for proc in self.started:
            self.stop(proc, grace=TEARDOWN_GRACE)
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()


@pytest.fixture
def procs() -> Iterator[Procs]:
    tracker = Procs()
    try:
        yield tracker
    finally:
        tracker.stop_all()


@pytest.fixture
def bootstrap_server() -> Iterator[int]:
    """A prefill's bootstrap server (the sim prefill's own) on a free port, stopped at teardown; its port."""
    port = free_port()
    server = BootstrapServer("127.0.0.1", port)
    server.start()
    try:
        yield port
    finally:
        server.stop()


def worker_process_argv(role: str, port: int, *extra: str, startup: float = 0.5) -> list[str]:
    """A sim worker the test runs itself, as a process (engine_helpers.worker_argv is a unit's command line); a
    port of its own for a prefill's bootstrap server unless ``extra`` names one."""
    bootstrap = [] if "--bootstrap-port" in extra else ["--bootstrap-port", str(free_port())]
    return [sys.executable, "-m", "pdtui.sim.worker", "--role", role, "--port", str(port),
            "--startup", str(startup), *bootstrap, *extra]


def read_until(proc: subprocess.Popen[str], needle: str, seen: list[str] | None = None,
               timeout: float = WAIT) -> list[str]:
    """Read ``proc``'s stdout until a line contains ``needle``; fail the test on EOF.

    A watchdog kills the process group after ``timeout`` seconds, so a line
    that never comes ends the read with EOF instead of hanging the test run.
    """
    lines = seen if seen is not None else []
    watchdog = threading.Timer(timeout, _kill_group, (proc,))
    watchdog.start()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if needle in line:
                return lines
    finally:
        watchdog.cancel()
    pytest.fail(f"{needle!r} never came; got {lines[-5:]}")


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


__all__ = ["Procs", "bootstrap_server", "free_port", "gone", "procs", "fetch", "read_until", "status", "wait_until",
           "worker_process_argv"]


def pdtui_until(args: list[str], marker: str, sig: int = signal.SIGINT, wait: float = 60.0) -> tuple[int, str, str]:
    """``python -m pdtui ARGS``, sent ``sig`` (SIGINT as Ctrl-C does) to its process group once ``marker`` is
    printed; its exit status, everything it printed on stdout, and its stderr. Killed if it outlives ``wait``."""
    proc = subprocess.Popen([sys.executable, "-m", "pdtui", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, stdin=subprocess.DEVNULL)
    watchdog = threading.Timer(wait, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    try:
        seen = []
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                os.killpg(proc.pid, sig)
                break
        out, err = proc.communicate(timeout=wait)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, "".join(seen) + out, err


BAR = "Multi-thread loading shards: "


def without_bar(err: str | Iterable[str]) -> list[str] | Iterator[str]:
    """stderr's lines but the weight loader's progress bar (its redrawing ``\\r`` read as line ends by a text-mode
    pipe): a list of a text's, an iterator of a stream's."""
    if isinstance(err, str):
        return [line for line in err.splitlines() if line and not line.startswith(BAR)]
    return (line for line in err if line.strip() and not line.startswith(BAR))
