"""Attaching to a long-running unit: ``pdtui status`` judges its running invocation without reading all of it.

A sim decode worker writes N batch lines after its ready line (a server that
has served for a while). pdtui's attach read (the last ``ATTACH_LINES`` lines
plus the older telling lines of its start-up, found by ``journalctl --grep
--since --until`` on the host) is
timed side by side with reading the whole invocation's history, as a start
pdtui made reads it. Both run on this machine's journal (the real one where
installed, and the stand-in), median of 3 each.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, journals, parse_args, ratio, worker_argv  # noqa: E402
from pdtui.engine.readiness import LineJudge  # noqa: E402
from pdtui.hosts.local import LocalHost  # noqa: E402
from pdtui.servers.sglang.signatures import signatures_for  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.sim.unit_store import UnitStore  # noqa: E402
from pdtui.targets.systemd import shared_commands as units  # noqa: E402
from pdtui.targets.systemd.commands import Commands
from pdtui.targets.systemd.journal_json import parse_entry

RUNS = 3
# The worker is ready 0.2 s after its start and writes a day's lines in seconds: a 2 s start-up window stands
# for a 6 min timeout on a server that has served for days.
START_UP = 2.0


def _write_lines(sandbox: Sandbox, unit: str, count: int) -> tuple[str, float]:
    """Start the unit and wait until its invocation has written ``count`` lines; its invocation ID and start."""
    systemctl = sandbox.commands["systemctl"]
    subprocess.run([*systemctl, "start", unit], check=True, capture_output=True, timeout=60)
    state = UnitStore(sandbox.root).read_state(unit)
    invocation, entered = state.invocation, state.since_us / 1e6
    journalctl = sandbox.commands["journalctl"]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        out = subprocess.run([*journalctl, "--output=json", "--all", "--no-pager", "--quiet",
                              f"_SYSTEMD_INVOCATION_ID={invocation}"], capture_output=True, timeout=120).stdout
        if out.count(b"\n") >= count:
            subprocess.run([*systemctl, "stop", unit], check=True, capture_output=True, timeout=60)
            return invocation, entered
        time.sleep(0.2)
    raise SystemExit(f"bench: the worker did not write {count} lines in time")


async def _measure(sandbox: Sandbox, invocation: str, entered: float) -> dict:
    host = LocalHost("bench")
    commands = Commands(tuple(sandbox.commands["systemctl"]), tuple(sandbox.commands["journalctl"]))
    telling = LineJudge("fired up and ready", signatures_for("decode", [])).telling_pattern()

    async def run(argv, deadline):
        return await host.run(argv, timeout=300)

    async def attach() -> int:     # the start-up window as pdtui makes it of ActiveEnterTimestamp and the timeout
        return len(await units.attached_history(run, commands, invocation, telling,
                                                (entered - 1.0, entered + START_UP)))

    async def whole() -> int:
        result = await run(commands.journalctl("--output=json", "--all", "--no-pager", "--quiet",
                                               f"_SYSTEMD_INVOCATION_ID={invocation}"), None)
        return sum(1 for line in result.stdout.splitlines() if parse_entry(line) is not None)

    figures = {}
    for name, read in (("attach", attach), ("whole_history", whole)):
        times, lines = [], 0
        for _ in range(RUNS):
            started = time.perf_counter()
            lines = await read()
            times.append(time.perf_counter() - started)
        figures[name] = {"lines_read": lines, "seconds_p50": round(statistics.median(times), 3)}
    await host.close()
    return figures


def main() -> None:
    args = parse_args(__doc__ or "", lambda p: p.add_argument("--lines", type=int, default=200_000))
    count = 400 if args.quick else args.lines
    figures: dict = {"history_lines": count, "attach_lines": units.ATTACH_LINES, "start_up_window_s": START_UP,
                     "runs": RUNS, "journals": {}}
    if args.quick:
        units.ATTACH_LINES = 100
        figures["attach_lines"] = 100
    for name, real in journals(args):
        with Sandbox.create(tempfile.mkdtemp(prefix="pdtui-bench-attach-"), real_journal=real) as sandbox:
            port, boot = free_port(), free_port()
            rate = 2_000 if args.quick else 20_000      # --quick: a few hundred lines, beside the other benches
            unit = sandbox.add_unit("bench-decode", worker_argv("decode", port, bootstrap=boot, startup=0.2,
                                                                 log_rate=rate))
            invocation, entered = _write_lines(sandbox, unit, count)
            measured = asyncio.run(_measure(sandbox, invocation, entered))
            measured["speedup"] = ratio(measured["whole_history"]["seconds_p50"], measured["attach"]["seconds_p50"])
            figures["journals"][name] = measured
    emit(figures)


if __name__ == "__main__":
    main()
