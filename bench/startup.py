"""Start-up: ``pdtui --help`` wall time, and time to first paint of the TUI in a real pseudo-terminal.

First paint: ``pdtui up CONFIG`` runs in a pty (TERM=xterm-256color, 160x50)
against a sim sandbox whose units are never started (every service waits on a
unit the sandbox lacks, so preflight fails fast and nothing runs); the clock
stops when the title bar naming the deployment reaches the terminal. The
process is then stopped by its PID.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import deployment, emit, local_host, machine, parse_args, summary  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402

MARKER = b"bench-startup"   # the deployment's name in the title bar
PAINT_TIMEOUT = 30.0


def pdtui_argv() -> list[str]:
    found = shutil.which("pdtui")
    return [found] if found else [sys.executable, "-m", "pdtui"]


def help_time() -> float:
    t0 = time.perf_counter()
    subprocess.run([*pdtui_argv(), "--help"], check=True, capture_output=True)
    return time.perf_counter() - t0


def first_paint(config: Path) -> float:
    """Seconds from exec to the deployment's name on screen."""
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.execvp(pdtui_argv()[0], [*pdtui_argv(), "up", str(config)])
    t0 = time.perf_counter()
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    seen = b""
    try:
        while MARKER not in seen:
            if time.perf_counter() - t0 > PAINT_TIMEOUT:
                raise RuntimeError(f"no first paint; the terminal got {seen[-300:]!r}")
            ready, _, _ = select.select([fd], [], [], 1.0)
            if ready:
                try:
                    seen = seen[-64:] + os.read(fd, 65536)
                except OSError:
                    raise RuntimeError("pdtui exited before painting") from None
        return time.perf_counter() - t0
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    runs = 2 if args.quick else 10
    info = machine()
    sandbox = Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-sim-")))
    try:
        config = {"name": "bench-startup", "hosts": {"h": local_host(sandbox)},
                  "services": {"prefill": {"host": "h", "unit": "absent-prefill", "role": "prefill", "port": 1}}}
        deployment(config, sandbox.root)
        path = sandbox.root / "bench.yaml"
        helps = [help_time() for _ in range(runs)]
        paints = [first_paint(path) for _ in range(runs)]
    finally:
        sandbox.cleanup()
    emit({"machine": info, "quick": args.quick, "unit": "ms", "command": " ".join(pdtui_argv()),
          "help": summary(helps, 1000), "first_paint": summary(paints, 1000),
          "python_bare_ms": round(1000 * statistics.median(_bare() for _ in range(runs)), 1)})


def _bare() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
