"""What every benchmark shares: machine facts, percentiles, one JSON object out, sim deployments.

A benchmark prints figures, never asserts them: the numbers go to docs/benchmarks.md.
Each bench script puts the repository root on ``sys.path`` before importing this.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from pdtui.config import Deployment, parse_config
from pdtui.sim.command_lines import router_argv, worker_argv  # noqa: F401  (the benches' units)
from pdtui.targets import PLACEMENTS

READY_LINE = "fired up and ready"


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], object] | None = None) -> argparse.Namespace:
    """The bench's options (``extra`` adds its own); also makes SIGTERM unwind like an exception, so every bench cleans up."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the bench runs, not the figures")
    parser.add_argument("--journal", choices=("real", "stand-in", "both"), default=None,
                        help="the sandbox's journal: the real one (systemd-journal-remote + journalctl), pdtui's "
                             "stand-in, or both side by side in one run (default: both where the real one is "
                             "installed, else the stand-in)")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def journals(args: argparse.Namespace) -> list[tuple[str, bool]]:
    """The journals to measure on, as (name, real_journal) in the order they run."""
    from pdtui.sim import realjournal
    asked = args.journal or ("both" if realjournal.available() else "stand-in")
    if asked != "stand-in" and not realjournal.available():
        sys.exit("bench: the real journal needs systemd-journal-remote and journalctl (apt install systemd-journal-remote)")
    return {"real": [("real", True)], "stand-in": [("stand-in", False)],
            "both": [("real", True), ("stand-in", False)]}[asked]


def machine() -> dict:
    """Where the figures were measured: they mean little without it."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_at_start": list(os.getloadavg())}


def summary(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> dict:
    """n, p50, p99, mean, min and max of ``values`` times ``scale`` (e.g. 1000 for ms)."""
    if not values:
        return {"n": 0, "p50": None, "p99": None, "mean": None, "min": None, "max": None}
    ordered = sorted(v * scale for v in values)
    return {"n": len(ordered), "p50": round(percentile(ordered, 50), digits), "p99": round(percentile(ordered, 99), digits),
            "mean": round(statistics.fmean(ordered), digits), "min": round(ordered[0], digits),
            "max": round(ordered[-1], digits)}


def percentile(ordered: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) on sorted values."""
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(a: float | None, b: float | None, digits: int = 1) -> float | None:
    return round(a / b, digits) if a is not None and b else None


def emit(figures: dict) -> None:
    """The bench's one output: a JSON object on stdout, with the load at the end of the run."""
    figures.setdefault("machine", machine())
    figures["machine"]["load_at_end"] = list(os.getloadavg())
    print(json.dumps(figures, indent=1))


def local_host(sandbox) -> dict:
    return {"local": True, "commands": sandbox.commands}


def deployment(config: dict, where: Path) -> Deployment:
    """A config dict loaded exactly as a user's YAML file is."""
    text = yaml.safe_dump(config, sort_keys=False)
    path = where / "bench.yaml"
    path.write_text(text)
    return parse_config(text, str(path), PLACEMENTS)


class Stamps:
    """A subscriber that keeps every event with the wall-clock time it arrived."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.events: list[tuple[float, object]] = []

    def __call__(self, event: object) -> None:
        self.events.append((self.clock(), event))

    def first(self, predicate: Callable[[object], bool]) -> tuple[float, object] | None:
        return next(((t, e) for t, e in self.events if predicate(e)), None)
