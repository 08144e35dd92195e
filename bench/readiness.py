"""Readiness detection latency: ready line in the journal -> pdtui's READY event, vs the polling loop.

pdtui: a sim SGLang worker is brought up N times over the local host and over
loopback SSH (production Timing, default readiness: the log line AND ``/health``).
Latency is the wall time of the READY StateChanged minus the ``__REALTIME_TIMESTAMP``
the journal gave the ready line (same machine, same clock).

The reference loop (the 20 s polling loop pdtui replaces) is not run with its real 20 s sleeps N times: its
detection latency is modelled from real command costs. Each of its checks is a
fresh ``ssh`` + ``journalctl -u UNIT --no-pager | grep -c`` against the same
sim host; those are run and timed M times, then the loop's timeline (sleep,
prefill check, decode check, repeat) is replayed with those costs and a ready
line dropped at a uniformly random moment is noticed at the end of the first
iteration whose prefill check started after it. Assuming a check reads the
journal the instant its ssh starts favours the loop slightly.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    READY_LINE,
    Stamps,
    deployment,
    emit,
    journals,
    local_host,
    machine,
    parse_args,
    ratio,
    summary,
    worker_argv,
)
from bench._sshd import SshdPool  # noqa: E402
from pdtui.engine.events import LineKind, LogLines, StateChanged  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.engine.states import ServiceState  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402

STARTUP = 0.4            # seconds the sim worker takes to its ready line
MODEL_DRAWS = 20_000     # ready moments replayed against the loop's timeline


async def one_latency(sandbox: Sandbox, host: dict, index: int) -> float:
    """Bring one fresh worker unit up; seconds from its ready line's journal stamp to READY."""
    port = free_port()
    unit = sandbox.add_unit(f"bench-r{index}", worker_argv("prefill", port, bootstrap=free_port(), startup=STARTUP))
    config = {"name": "readiness", "hosts": {"h": host},
              "services": {"prefill": {"host": "h", "unit": unit, "role": "prefill", "port": port, "timeout": "60s"}}}
    stamps = Stamps()
    orchestrator = Orchestrator(deployment(config, sandbox.root), Registry(make_host), smoke=False)
    orchestrator.subscribe(stamps)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
        sandbox.stop_all()
    if not done.ok:
        raise RuntimeError(f"bring-up failed: {done.failures}")
    ready_at, _ = stamps.first(lambda e: isinstance(e, StateChanged) and e.new is ServiceState.READY)
    line = next(r for _, e in stamps.events if isinstance(e, LogLines)
                for r in e.lines if r.kind is LineKind.READY)
    return ready_at - line.timestamp


def check_costs(pool: SshdPool, server, sandbox: Sandbox, unit: str, count: int) -> list[float]:
    """Seconds per loop check: a fresh ssh running journalctl | grep -c, as the loop does it."""
    command = f"{sandbox.bin_dir / 'journalctl'} -u {unit} --no-pager | grep -c {READY_LINE!r}"
    costs = []
    for _ in range(count):
        t0 = time.monotonic()
        out = subprocess.run(pool.ssh(server, command), capture_output=True, text=True, timeout=30)
        costs.append(time.monotonic() - t0)
        if out.stdout.strip() != "1":
            raise RuntimeError(f"loop check saw {out.stdout.strip()!r} ready lines: {out.stderr.strip()}")
    return costs


def loop_latencies(sleep: float, costs: list[float], draws: int, rng: random.Random) -> list[float]:
    """Replay the loop (sleep; check prefill; check decode) with measured costs; latency per ready moment."""
    starts, ends, t = [], [], 0.0
    while len(starts) < 2000:
        t += sleep
        starts.append(t)                                  # the prefill check reads the journal here
        t += rng.choice(costs) + rng.choice(costs)         # prefill check, then decode check
        ends.append(t)                                     # the loop knows at the end of the iteration
    horizon = starts[-2]
    latencies = []
    for _ in range(draws):
        ready = rng.uniform(0, horizon)
        k = bisect.bisect_left(starts, ready)
        latencies.append(ends[k] - ready)
    return latencies


async def pdtui_latencies(sandbox: Sandbox, host: dict, count: int, offset: int) -> list[float]:
    return [await one_latency(sandbox, host, offset + i) for i in range(count)]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    samples, checks = (2, 3) if args.quick else (30, 40)
    info = machine()
    pool = SshdPool()
    by_journal: dict[str, dict] = {}
    costs: list[float] = []
    try:
        server = pool.start()
        for name, real in journals(args):    # side by side, in one run
            sandbox = Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-sim-")), real_journal=real)
            try:
                local = asyncio.run(pdtui_latencies(sandbox, local_host(sandbox), samples, 0))
                ssh = asyncio.run(pdtui_latencies(sandbox, pool.host(server, sandbox), samples, samples))
                if not costs:
                    costs = check_costs(pool, server, sandbox, "bench-r0", checks)
            finally:
                sandbox.cleanup()
            by_journal[name] = {"pdtui_local": summary(local, 1000), "pdtui_ssh": summary(ssh, 1000)}
    finally:
        pool.close()
    rng = random.Random(8)
    draws = 500 if args.quick else MODEL_DRAWS
    first = next(iter(by_journal.values()))
    figures = {"machine": info, "quick": args.quick, "unit": "ms", "journal": next(iter(by_journal)),
               "pdtui_local": first["pdtui_local"], "pdtui_ssh": first["pdtui_ssh"], "by_journal": by_journal,
               "loop_check_cost": summary(costs, 1000),
               "loop_20s": summary(loop_latencies(20, costs, draws, rng), 1000, 0),
               "loop_5s": summary(loop_latencies(5, costs, draws, rng), 1000, 0)}
    p = figures["pdtui_ssh"]
    figures["ratios"] = {f"{loop}_{q}_over_pdtui_ssh": ratio(figures[loop][q], p[q], 0)
                         for loop in ("loop_20s", "loop_5s") for q in ("p50", "p99")}
    figures["target"] = {"pdtui_ssh_p99_ms": 200, "met": p["p99"] is not None and p["p99"] <= 200,
                         "loop_20s_p99_ratio_min": 50,
                         "ratio_met": (figures["ratios"]["loop_20s_p99_over_pdtui_ssh"] or 0) >= 50}
    emit(figures)


if __name__ == "__main__":
    main()
