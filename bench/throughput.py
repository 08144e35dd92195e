"""Log throughput end to end: sim backends at K lines/s -> journal -> journalctl -f over loopback SSH -> TUI.

The whole chain runs for real: two sim SGLang workers (``--log-rate K/2`` each)
and the default real router as units of a sim sandbox; pdtui's engine follows
their journal with ``journalctl -f -o json`` over loopback sshd, parses, judges
readiness and feeds the running TUI (PdtuiApp under ``run_test``, headless, 160x50,
three panels). For each K, once every service is ready, lines are watched for a
window: display lag = when a line was handed to its panel minus its journal
timestamp; a 10 ms ticker in the app's event loop measures stalls; /proc says
how busy each stage was. The sweep stops at the first K that misses
(lag p99 > 250 ms, a stall > 50 ms, or fewer lines than sent). Then: a cProfile
of the pdtui process at that K, RSS after 1,000,000 lines, and the UI alone
(LogLines straight into the three panels) against Textual's own Log widget.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import resource
import sys
import tempfile
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import deployment, emit, journals, machine, parse_args, router_argv, summary, worker_argv  # noqa: E402
from bench._procs import PDTUI_STAGE, StageCpu  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from pdtui.engine.events import LogLines, LogRecord, PlanReady, ServiceInfo, Step  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402
from pdtui.ui.app import PdtuiApp  # noqa: E402
from pdtui.ui.logview import LogView  # noqa: E402

LAG_P99_MAX = 0.250
DRAINED_LAG = 0.150
DRAIN_MAX = 20.0
STALL_MAX = 0.050
SIZE = (160, 50)
BATCH_LINE = ("[2026-04-15 08:41:05 TP0] Decode batch. #running-req: 12, #token: 5376, token usage: 0.01, "
              "gen throughput (token/s): 812.44, #queue-req: 0")


class Watch:
    """Lag of every line when its panel paints it, and event-loop stalls, while ``active``.

    A log view takes lines at once but repaints at most every ``PAINT_INTERVAL``:
    the lag counts until the paint that puts a line on screen.
    """

    def __init__(self) -> None:
        self.active = False
        self.lags = array("d")         # compact: the bench shares the process (and its RSS) with pdtui
        self.keep_lags = True
        self.lines = 0
        self.max_stall = 0.0
        self.latest_lag: float | None = None    # of the newest line painted, active or not

    def hook(self, app: PdtuiApp) -> None:
        self.app = app

    def __enter__(self) -> Watch:
        LogView.paint_listeners.append(self.painted)
        return self

    def __exit__(self, *exc: object) -> None:
        LogView.paint_listeners.remove(self.painted)

    def painted(self, view: LogView, start: int, stop: int) -> None:
        """A paint of ``view`` put lines ``start`` to ``stop`` on screen: their lags, when it is a panel's."""
        if view not in self.panel_views():
            return
        now = time.time()
        lags = [now - stamp for stamp in view.timestamps(start, stop)]
        if lags:
            self.latest_lag = lags[-1]
        if self.active:
            self.lines += stop - start
            if self.keep_lags:
                self.lags.extend(lags)

    def panel_views(self) -> list[LogView]:
        return [panel.log_view for panel in self.app.deployment.panels.values()]

    async def ticker(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(0.01)
            if self.active:
                self.max_stall = max(self.max_stall, time.monotonic() - t0 - 0.01)


class Rig:
    """One sshd for the whole sweep; a fresh sandbox (units, journal) per run.

    A sweep writes millions of lines; the sim's journalctl scans its file for an
    invocation's history, so a journal that grew over earlier runs would slow the
    next bring-up (a real journal is indexed).
    """

    def __init__(self, real_journal: bool) -> None:
        self.real_journal = real_journal
        self.pool = SshdPool()
        self.sandbox = _fresh_sandbox(real_journal)
        self.server = self.pool.start()
        self.runs = 0

    def config(self, rate: float) -> dict:
        self.runs += 1
        if self.runs > 1:
            self.sandbox.cleanup()
            self.sandbox = _fresh_sandbox(self.real_journal)
        p, d, r, boot = (free_port() for _ in range(4))
        add, n = self.sandbox.add_unit, self.runs
        units = {"prefill": add(f"tp-p{n}", worker_argv("prefill", p, bootstrap=boot, startup=0.3, log_rate=rate / 2)),
                 "decode": add(f"tp-d{n}", worker_argv("decode", d, bootstrap=boot, startup=0.3, log_rate=rate / 2)),
                 "router": add(f"tp-r{n}", router_argv(r, [(p, boot)], [d]))}
        ports = {"prefill": p, "decode": d, "router": r}
        return {"name": "bench-throughput", "hosts": {"h": self.pool.host(self.server, self.sandbox)},
                "services": {s: {"host": "h", "unit": u, "role": s, "port": ports[s], "timeout": "60s"}
                             for s, u in units.items()}}

    async def run(self, rate: float, window: float, *, profile: cProfile.Profile | None = None,
                  until_lines: int | None = None) -> dict:
        """Bring up at ``rate`` lines/s in the TUI; watch ``window`` seconds (or until ``until_lines``)."""
        orchestrator = Orchestrator(deployment(self.config(rate), self.sandbox.root), Registry(make_host), smoke=False)
        app = PdtuiApp(orchestrator)
        watch = Watch()
        watch.keep_lags = until_lines is None     # the RSS run counts lines; a million lags would count too
        watch.hook(app)
        stages = StageCpu(self.sandbox.root, [self.server.process.pid])
        try:
            with watch:
                async with app.run_test(headless=True, size=SIZE) as pilot:
                    ticker = asyncio.create_task(watch.ticker())
                    await asyncio.wait_for(until_done(app), 120)
                    if not app.deployment.done.ok:
                        raise RuntimeError(f"bring-up failed: {app.deployment.done.failures}")
                    await drained(watch)
                    watch.active = True
                    stages.start()
                    if profile:
                        profile.enable()
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < window or (until_lines and watch.lines < until_lines):
                        await asyncio.sleep(0.1)
                    elapsed = time.monotonic() - t0
                    if profile:
                        profile.disable()
                    watch.active = False
                    busy = stages.stop()
                    ticker.cancel()
                    await orchestrator.close()      # no more events while the app shuts down
                    await pilot.pause()
        finally:
            await orchestrator.close()
            self.sandbox.stop_all()
        lag = summary(watch.lags, 1000)
        ok = lag["p99"] is not None and lag["p99"] <= LAG_P99_MAX * 1000 and watch.max_stall <= STALL_MAX \
            and watch.lines >= 0.9 * rate * elapsed
        pdtui_cores = busy.get(PDTUI_STAGE) or 0
        return {"rate": rate, "delivered_per_s": round(watch.lines / elapsed), "lag_ms": lag,
                "pdtui_lines_per_core_s": round(watch.lines / elapsed / pdtui_cores) if pdtui_cores else None,
                "max_stall_ms": round(watch.max_stall * 1000, 1), "ok": ok, "cores_busy": busy,
                "lines": watch.lines, "rss_mb": rss_mb()}

    def close(self) -> None:
        self.sandbox.cleanup()
        self.pool.close()


def _fresh_sandbox(real_journal: bool) -> Sandbox:
    return Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-sim-")), real_journal=real_journal)


async def drained(watch: Watch, limit: float = DRAIN_MAX) -> None:
    """Wait until the lines logged during the bring-up are shown (the newest painted line is fresh).

    The backends log at full rate from their first second, while the screen is
    still being built: the window measures the steady state after that backlog.
    """
    deadline = time.monotonic() + limit
    await asyncio.sleep(0.5)
    while time.monotonic() < deadline and (watch.latest_lag is None or watch.latest_lag > DRAINED_LAG):
        await asyncio.sleep(0.1)


async def until_done(app: PdtuiApp) -> None:
    while app.deployment.done is None:
        await asyncio.sleep(0.05)


def rss_mb() -> float:
    """Resident set size of this process now (VmRSS), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def top_functions(profile: cProfile.Profile, count: int = 15) -> list[str]:
    stats = pstats.Stats(profile)
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:count]
    total = sum(v[2] for v in stats.stats.values()) or 1
    return [f"{Path(f).name}:{line} {name} {tt:.2f}s ({100 * tt / total:.0f}%)"
            for (f, line, name), (_, _, tt, _, _) in rows]


# -- the UI alone ---------------------------------------------------------------------------


class StillSource:
    """An event source that announces three services and then stays quiet."""

    SERVICES = ("prefill", "decode", "router")

    def __init__(self) -> None:
        self.callbacks = []

    def subscribe(self, callback) -> None:
        self.callbacks.append(callback)

    async def run(self):
        infos = tuple(ServiceInfo(s, s, f"sglang-{s}", "h", (), None, None, (), 60.0) for s in self.SERVICES)
        for callback in self.callbacks:
            callback(PlanReady("bench", infos, tuple(Step)))
        await asyncio.Event().wait()

    def retry(self, service: str) -> bool:
        return False

    def show_figures(self, services) -> None:
        return None

    async def close(self) -> None:
        return None


async def panels_alone(total: int, batch: int) -> float:
    """Lines per second PdtuiApp's three panels take, batches handed straight to them."""
    app = PdtuiApp(StillSource())
    records = tuple(LogRecord(f"{BATCH_LINE} {i}", timestamp=time.time()) for i in range(batch))
    async with app.run_test(headless=True, size=SIZE) as pilot:
        while len(app.deployment.panels) < 3:
            await pilot.pause()
        t0 = time.perf_counter()
        for i in range(total // batch):
            service = StillSource.SERVICES[i % 3]
            app.deployment.apply(LogLines(service, records))
            await asyncio.sleep(0)
        await pilot.pause()
        return total / (time.perf_counter() - t0)


async def textual_log(total: int, batch: int) -> float:
    """The same through three of Textual's own Log widgets (write_lines)."""
    from textual.app import App
    from textual.widgets import Log

    class Three(App):
        def compose(self):
            for _ in range(3):
                yield Log(max_lines=10_000)

    app = Three()
    lines = [f"{BATCH_LINE} {i}" for i in range(batch)]
    async with app.run_test(headless=True, size=SIZE) as pilot:
        logs = list(app.query(Log))
        t0 = time.perf_counter()
        for i in range(total // batch):
            logs[i % 3].write_lines(lines)
            await asyncio.sleep(0)
        await pilot.pause()
        return total / (time.perf_counter() - t0)


def per_line(sweep: list[dict]) -> dict | None:
    """What each line more costs pdtui's process, from the first two rates that passed (the slope of its busy cores
    against the rate delivered), and what a flowing log costs besides (the intercept: the panels' paint beat)."""
    passed = [r for r in sweep if r["ok"] and r["cores_busy"].get(PDTUI_STAGE)][:2]
    if len(passed) < 2:
        return None
    (low, high) = passed
    slope = (high["cores_busy"][PDTUI_STAGE] - low["cores_busy"][PDTUI_STAGE]) / (high["delivered_per_s"]
                                                                                 - low["delivered_per_s"])
    return {"rates": [low["rate"], high["rate"]], "us_each_line_more": round(slope * 1e6, 1),
            "cores_besides": round(low["cores_busy"][PDTUI_STAGE] - slope * low["delivered_per_s"], 3),
            "us_a_line_in_all": {str(r["rate"]): round(r["cores_busy"][PDTUI_STAGE] / r["delivered_per_s"] * 1e6, 1)
                                 for r in passed},
            "target_us": 15, "met": slope * 1e6 <= 15}


def _sweep(rig: Rig, rates: list[int], window: float) -> list[dict]:
    """Each rate in turn until one fails its targets."""
    sweep = []
    for rate in rates:
        result = asyncio.run(rig.run(rate, window))
        sweep.append(result)
        if not result["ok"]:
            break
    return sweep


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    quick = args.quick
    rates = [1000] if quick else [2000, 5000, 10_000, 20_000, 30_000, 40_000, 50_000, 60_000, 70_000, 85_000, 100_000]
    window = 1.5 if quick else 10.0
    million = 5000 if quick else 1_000_000
    info = machine()
    ui_total = 6000 if quick else 600_000
    ui = {"lines": ui_total, "batch": 1000,
          "pdtui_panels_per_s": round(asyncio.run(panels_alone(ui_total, 1000))),
          "textual_log_per_s": round(asyncio.run(textual_log(ui_total, 1000)))}
    (first, real), *others = journals(args)
    rig = Rig(real)
    sweep, profile_at, profile = [], None, cProfile.Profile()
    try:
        sweep = _sweep(rig, rates, window)
        passed = [r["rate"] for r in sweep if r["ok"]]
        profile_at = sweep[-1]["rate"]
        profiled = asyncio.run(rig.run(profile_at, min(window, 5.0), profile=profile))
        # RSS needs lines, not low lag: feed the million at the highest rate that passed.
        steady = max(passed) if passed else rates[0]
        memory = asyncio.run(rig.run(steady, 0, until_lines=million))
    finally:
        rig.close()
    highest = {first: max(passed) if passed else None}
    for name, other_real in others:      # the other journal side by side: its sweep only
        other = Rig(other_real)
        try:
            highest[name] = max((r["rate"] for r in _sweep(other, rates, window) if r["ok"]), default=None)
        finally:
            other.close()
    figures = {"machine": info, "quick": quick, "window_s": window, "ui_alone": ui, "journal": first,
               "highest_ok_lines_per_s_by_journal": highest,
               "ui_ratio_pdtui_over_textual_log": round(ui["pdtui_panels_per_s"] / ui["textual_log_per_s"], 2),
               "sweep": sweep, "highest_ok_lines_per_s": max(passed) if passed else None, "per_line": per_line(sweep),
               "profile": {"rate": profile_at, "delivered_per_s": profiled["delivered_per_s"],
                           "cores_busy": profiled["cores_busy"], "top_tottime": top_functions(profile)},
               "rss": {"lines": memory["lines"], "rate": steady, "rss_mb": memory["rss_mb"]},
               "target": {"lines_per_s": 100_000, "met": bool(passed) and max(passed) >= 100_000,
                          "rss_mb": 150, "rss_met": memory["rss_mb"] <= 150}}
    emit(figures)


if __name__ == "__main__":
    main()
