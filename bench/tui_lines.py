"""The TUI alone on quiet logs: CPU per pair of journal lines, and how much of it is Textual's frame.

What bench/idle.py's deployment shows while idle, without the engine, SSH or the servers: PdtuiApp under
``run_test`` (headless, 160x50) on a scripted event source, everything ready, each backend's log holding
``--fill`` lines. Then, ``--pairs`` times, the prefill and the decode each get one batch line (the stand-in
workers log theirs on the same beat), and the loop idles for ``--gap`` seconds.

cpu_ms_per_pair is this process's CPU per pair, the idle gaps included; idle_ms_per_gap the same loop with no
line at all (the clock, the heap release, the event loop's own wake-ups); frame_ms_per_pair the part of the
first that Textual's frame took (its compositor's timer callback: the dirty widgets' lines cut and joined).
percent_at_idle_rate is what the lines cost at bench/idle.py's rate, one pair every 2 s.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual.screen import Screen  # noqa: E402

from bench._common import emit, machine, parse_args  # noqa: E402
from pdtui.engine.events import LineKind, LogLines, LogRecord  # noqa: E402
from pdtui.sim.scripted import T0, ScriptedSource, ready_script  # noqa: E402
from pdtui.ui.app import PdtuiApp  # noqa: E402

IDLE_PAIR_EVERY = 2.0     # bench/idle.py: each stand-in worker logs a batch line every 2 s
BACKENDS = ("prefill", "decode")


def cpu_seconds() -> float:
    return time.process_time()     # every thread of the process, finer than os.times()' clock ticks


class FrameClock:
    """Sums the time of Textual's frames (the screen's update timer) while on."""

    def __init__(self) -> None:
        self.on, self.seconds, self.frames = False, 0.0, 0
        self._original = Screen._on_timer_update

        def timed(screen: Screen) -> None:
            started = time.perf_counter()
            try:
                self._original(screen)
            finally:
                if self.on:
                    self.seconds += time.perf_counter() - started
                    self.frames += 1

        Screen._on_timer_update = timed     # type: ignore[method-assign]

    def close(self) -> None:
        Screen._on_timer_update = self._original     # type: ignore[method-assign]


def line(service: str, n: int) -> LogLines:
    text = f"[2025-10-16 09:07:{n % 60:02d} TP0] Decode batch. #running-req: 0, #token: {n}, token usage: 0.00"
    return LogLines(service, (LogRecord(text, LineKind.NORMAL, T0 + n),), 60.0 + n)


async def measure(pairs: int, fill: int, gap: float) -> dict:
    source = ScriptedSource(ready_script())
    app = PdtuiApp(source)
    frames = FrameClock()
    try:
        async with app.run_test(headless=True, size=(160, 50)):
            await asyncio.sleep(1.0)
            for n in range(fill):
                source.emit(*(line(service, n) for service in BACKENDS))
            await asyncio.sleep(1.0)               # past the fill's paints
            cpu0 = cpu_seconds()
            for _ in range(pairs):
                await asyncio.sleep(gap)
            quiet = cpu_seconds() - cpu0
            frames.on, cpu0 = True, cpu_seconds()
            for n in range(fill, fill + pairs):
                source.emit(*(line(service, n) for service in BACKENDS))
                await asyncio.sleep(gap)
            busy, frames.on = cpu_seconds() - cpu0, False
    finally:
        frames.close()
    per_pair = 1000 * busy / pairs
    return {"pairs": pairs, "fill": fill, "gap_s": gap,
            "cpu_ms_per_pair": round(per_pair, 2),
            "idle_ms_per_gap": round(1000 * quiet / pairs, 2),
            "frame_ms_per_pair": round(1000 * frames.seconds / pairs, 2),
            "frames_per_pair": round(frames.frames / pairs, 2),
            "percent_at_idle_rate": round(100 * (per_pair / 1000) / IDLE_PAIR_EVERY, 3)}


def main() -> None:
    def options(parser) -> None:
        parser.add_argument("--pairs", type=int, default=200, help="pairs of lines measured (default 200)")
        parser.add_argument("--fill", type=int, default=1000, help="lines in each backend's log first (default 1000)")
        parser.add_argument("--gap", type=float, default=0.15, help="seconds between two pairs (default 0.15)")
    args = parse_args(__doc__.splitlines()[0], options)
    pairs, fill = (10, 50) if args.quick else (args.pairs, args.fill)
    info = machine()
    emit({"machine": info, "quick": args.quick, "tui_alone": asyncio.run(measure(pairs, fill, args.gap))})


if __name__ == "__main__":
    main()
