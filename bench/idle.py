"""Idle cost: CPU of the TUI process with everything ready and quiet logs.

The reference deployment (sim prefill + decode at the worker's default 0.5
lines/s each, the default real router) is brought up over loopback SSH in
PdtuiApp under ``run_test`` (headless, 160x50). Once every service is ready,
the CPU time of this process (user + system, all threads: Textual, the engine,
asyncssh) is read over two 30 s windows: one a second after the bring-up's end
(``right_after_bring_up``: its last transients inside, the first figures laid
out, logs short enough that their scrollbars move on every few lines), and one
a minute after it (``tui_ssh``: the steady state of a pane left open, what the
goal is about). The engine keeps following the journal, polling the figures and
watching health and the units meanwhile; that is part of the cost.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import deployment, emit, machine, parse_args, router_argv, worker_argv  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402
from pdtui.ui.app import PdtuiApp  # noqa: E402


def cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


async def measure(sandbox: Sandbox, host: dict, window: float, profile: bool = False,
                  settle: tuple[float, ...] = (1.0, 60.0)) -> list[dict]:
    """The CPU of a window of ``window`` seconds starting at each of ``settle`` seconds after the bring-up's end."""
    p, d, r, boot = (free_port() for _ in range(4))
    units = {"prefill": sandbox.add_unit("idle-p", worker_argv("prefill", p, bootstrap=boot, startup=0.5)),
             "decode": sandbox.add_unit("idle-d", worker_argv("decode", d, bootstrap=boot, startup=0.5)),
             "router": sandbox.add_unit("idle-r", router_argv(r, [(p, boot)], [d]))}
    ports = {"prefill": p, "decode": d, "router": r}
    config = {"name": "bench-idle", "hosts": {"h": host},
              "services": {s: {"host": "h", "unit": u, "role": s, "port": ports[s], "timeout": "60s"}
                           for s, u in units.items()}}
    orchestrator = Orchestrator(deployment(config, sandbox.root), Registry(make_host))
    app = PdtuiApp(orchestrator)
    windows = []
    try:
        async with app.run_test(headless=True, size=(160, 50)) as pilot:
            deadline = time.monotonic() + 120
            while app.deployment.done is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if app.deployment.done is None or not app.deployment.done.ok:
                raise RuntimeError(f"bring-up did not succeed: {app.deployment.done}")
            done_at = time.monotonic()
            for after in settle:
                await asyncio.sleep(max(0.0, done_at + after - time.monotonic()))
                windows.append({"after_s": after, **await one_window(window, profile)})
            await orchestrator.close()
            await pilot.pause()
    finally:
        await orchestrator.close()
        sandbox.stop_all()
    return windows


async def one_window(window: float, profile: bool) -> dict:
    profiler = cProfile.Profile() if profile else None
    cpu0, t0 = cpu_seconds(), time.monotonic()
    if profiler is not None:
        profiler.enable()
    await asyncio.sleep(window)
    if profiler is not None:
        profiler.disable()
    cpu, wall = cpu_seconds() - cpu0, time.monotonic() - t0
    figures: dict = {"window_s": round(wall, 1), "cpu_s": round(cpu, 3), "percent_of_a_core": round(100 * cpu / wall, 2)}
    if profiler is not None:
        figures["profile"] = top_frames(profiler)
    return figures


def top_frames(profiler: cProfile.Profile, count: int = 25) -> dict[str, list[str]]:
    """The functions that took the most time of their own over the window, and pdtui's own by their cumulative
    time (what set the work off), with how often each ran."""
    stats = pstats.Stats(profiler).stats      # type: ignore[attr-defined]

    def rows(key: int, keep=lambda file: True) -> list[str]:
        picked = sorted(((k, v) for k, v in stats.items() if keep(k[0])), key=lambda item: item[1][key],
                        reverse=True)[:count]
        return [f"{v[key] * 1000:.1f} ms  {v[1]} calls  {Path(f).name}:{line} {name}" for (f, line, name), v in picked]
    return {"own_time": rows(2), "pdtui_cumulative": rows(3, lambda file: "/pdtui/" in file)}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", action="store_true", help="cProfile each window: the top frames by their own time")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], options)
    window, settle = (2.0, (0.5, 3.0)) if args.quick else (30.0, (1.0, 60.0))
    info = machine()
    pool = SshdPool()
    sandbox = Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-sim-")))
    try:
        server = pool.start()
        right_after, steady = asyncio.run(measure(sandbox, pool.host(server, sandbox), window, args.profile, settle))
    finally:
        sandbox.cleanup()
        pool.close()
    emit({"machine": info, "quick": args.quick, "tui_ssh": steady, "right_after_bring_up": right_after,
          "target": {"percent_of_a_core": 0.5, "met": steady["percent_of_a_core"] <= 0.5}})


if __name__ == "__main__":
    main()
