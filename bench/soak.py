"""Soak: the demo deployment left running with steady logs; prints RSS and CPU figures as JSON.

``python bench/soak.py --minutes 10 [--log-rate 50]`` brings the demo up in this
process (the headless path: orchestrator, journal tail, line printer with logs,
writing to /dev/null), then keeps following the journals for the given time.
Every ``--every`` seconds it samples this process's RSS and CPU, the lines
received, and the RSS of the simulated units, and at the end prints one JSON
object: the samples and a summary comparing the first and the last minute.
Memory and CPU should be flat; a leak shows as RSS growing with the lines seen.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pdtui.engine.events import LogLines  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.faces.headless import LinePrinter  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim import demo  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int | str = "self") -> float | None:
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return round(pages * PAGE / 2**20, 1)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (from /proc, so it works for processes we did not start)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Counter:
    """Counts journal lines as they arrive."""

    def __init__(self) -> None:
        self.lines = 0

    def __call__(self, event) -> None:
        if isinstance(event, LogLines):
            self.lines += len(event.lines)


def add_log_rate(sandbox: Sandbox, rate: float) -> None:
    """Make the demo's workers log ``rate`` steady-state lines a second."""
    for name in ("sglang-dsv4-prefill", "sglang-dsv4-decode"):
        unit = sandbox.store.load(name)
        sandbox.add_unit(name, [*unit.argv, "--log-rate", f"{rate:g}"], description=unit.description)


def unit_pids(sandbox: Sandbox) -> dict[str, int]:
    pids = {}
    for name in sandbox.store.started_names():
        state = sandbox.store.read_state(name)
        if state.child:
            pids[name] = state.child[0]
    return pids


async def soak(args: argparse.Namespace) -> dict:
    with Sandbox.create() as sandbox:
        deployment = demo.build(sandbox, demo.DemoOptions({}, startup=2.0, timeout="2m"))
        add_log_rate(sandbox, args.log_rate)
        counter = Counter()
        orchestrator = Orchestrator(deployment, Registry(make_host), smoke=True)
        with open(os.devnull, "w") as null:
            orchestrator.subscribe(LinePrinter(null, logs=True))
            orchestrator.subscribe(counter)
            try:
                done = await orchestrator.run()
                if not done.ok:
                    return {"ok": False, "failures": done.failures}
                samples = await sample(args, counter, sandbox)
            finally:
                await orchestrator.close()
    return {"ok": True, "minutes": args.minutes, "log_rate_per_worker": args.log_rate,
            "summary": summarize(samples, args.every), "samples": samples}


async def sample(args: argparse.Namespace, counter: Counter, sandbox: Sandbox) -> list[dict]:
    samples = []
    start = time.monotonic()
    last_t, last_cpu, last_helpers = start, _own_cpu(), _helpers_cpu()
    while time.monotonic() - start < args.minutes * 60:
        await asyncio.sleep(args.every)
        now, cpu, helpers = time.monotonic(), _own_cpu(), _helpers_cpu()
        samples.append({
            "t": round(now - start, 1),
            "rss_mib": rss_mib(),
            "cpu_percent": round(100 * (cpu - last_cpu) / (now - last_t), 1),
            "helpers_cpu_percent": round(100 * (helpers - last_helpers) / (now - last_t), 1),
            "lines": counter.lines,
            "units_rss_mib": {name: rss_mib(pid) for name, pid in unit_pids(sandbox).items()},
        })
        last_t, last_cpu, last_helpers = now, cpu, helpers
    return samples


def _own_cpu() -> float:
    """CPU seconds of this process: the engine, the printer, the event loop."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _helpers_cpu() -> float:
    """CPU seconds of the commands pdtui ran: reaped ones (systemctl show...) and live ones (journalctl -f)."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = 0.0
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            live += cpu_seconds(int(pid)) or 0.0
    return reaped.ru_utime + reaped.ru_stime + live


def summarize(samples: list[dict], every: float) -> dict:
    per_minute = max(1, int(60 / every))
    first, last = samples[:per_minute], samples[-per_minute:]

    def mean(rows: list[dict], key: str) -> float:
        return round(sum(r[key] for r in rows) / len(rows), 1)

    return {
        "lines_received": samples[-1]["lines"],
        "rss_mib_first_minute": mean(first, "rss_mib"),
        "rss_mib_last_minute": mean(last, "rss_mib"),
        "rss_mib_max": max(r["rss_mib"] for r in samples),
        "cpu_percent_first_minute": mean(first, "cpu_percent"),
        "cpu_percent_last_minute": mean(last, "cpu_percent"),
        "helpers_cpu_percent_first_minute": mean(first, "helpers_cpu_percent"),
        "helpers_cpu_percent_last_minute": mean(last, "helpers_cpu_percent"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--log-rate", type=float, default=50.0, help="steady lines a second per worker")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(soak(args)), indent=1))


if __name__ == "__main__":
    main()
