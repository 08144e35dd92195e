"""Where a bring-up's time goes: one headless SSH bring-up of the reference deployment, as a timeline.

The deployment is bench/bringup.py's (sim prefill and decode, the router after
them) over loopback SSH. Every remote command pdtui runs (start and end), every
TCP connection it opens through SSH, every engine event and the journal's
milestones (systemd's "Started", the ready lines, the router's worker
activations) are put on one time axis, in seconds from the start of the
bring-up. Reading it shows the critical path: what runs one after another.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import READY_LINE, deployment, emit, machine, parse_args  # noqa: E402
from bench._journal import ACTIVATED, entries  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from bench.bringup import Reference  # noqa: E402
from pdtui.engine.events import Event, LogLines  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402
from pdtui.targets.systemd.journal_json import decode_field


def milestone(message: str) -> bool:
    """A worker's ready line or a router's "Activated" line (besides systemd's "Started" lines)."""
    return READY_LINE in message or ACTIVATED.search(message) is not None


class Timeline:
    """Rows of (start, end or None, what), in seconds from ``t0``."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.rows: list[tuple[float, float | None, str]] = []

    def now(self) -> float:
        return time.time() - self.t0

    def add(self, start: float, end: float | None, what: str) -> None:
        self.rows.append((round(start, 3), None if end is None else round(end, 3), what))

    def event(self, event: Event) -> None:
        if not isinstance(event, LogLines):
            self.add(self.now(), None, repr(event)[:160])


class TimedHost:
    """A Host that puts its commands, streams and TCP connections on the timeline."""

    def __init__(self, host, timeline: Timeline) -> None:
        self.host, self.timeline, self.name = host, timeline, host.name

    async def run(self, argv, *, timeout=None, read_only=False):
        start = self.timeline.now()
        try:
            return await self.host.run(argv, timeout=timeout, read_only=read_only)
        finally:
            self.timeline.add(start, self.timeline.now(), "run " + " ".join(a for a in argv if "/" not in a))

    @asynccontextmanager
    async def stream(self, argv):
        start = self.timeline.now()
        async with self.host.stream(argv) as lines:
            self.timeline.add(start, self.timeline.now(), "stream " + " ".join(a for a in argv if "/" not in a))
            yield lines

    async def open_tcp(self, port, *, timeout=None, address="127.0.0.1"):
        start = self.timeline.now()
        try:
            return await self.host.open_tcp(port, timeout=timeout, address=address)
        finally:
            self.timeline.add(start, self.timeline.now(), f"tcp {port}")

    async def close(self) -> None:
        await self.host.close()


def milestones(sandbox: Sandbox, timeline: Timeline) -> None:
    for entry in entries(sandbox):
        message = decode_field(entry.get("MESSAGE"))
        if (entry.get("UNIT") and message.startswith("Started ")) or milestone(message):
            at = int(entry["__REALTIME_TIMESTAMP"]) / 1e6 - timeline.t0
            timeline.add(at, None, f"journal {entry.get('UNIT') or entry.get('_SYSTEMD_UNIT')}: {message[-90:]}")


async def bring_up(sandbox: Sandbox, ref: Reference, host: dict) -> Timeline:
    timeline = Timeline()
    orchestrator = Orchestrator(deployment(ref.config(host), sandbox.root),
                                Registry(lambda config, **options: TimedHost(make_host(config, **options), timeline)))
    orchestrator.subscribe(timeline.event)
    timeline.t0 = time.time()
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
    if not done.ok:
        raise RuntimeError(f"bring-up failed: {done.failures}")
    return timeline


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    info = machine()
    pool = SshdPool()
    sandbox = Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-timeline-")))
    try:
        server = pool.start()
        ref = Reference(sandbox, 1, 0.5 if args.quick else 3.0)
        timeline = asyncio.run(bring_up(sandbox, ref, pool.host(server, sandbox)))
        milestones(sandbox, timeline)
    finally:
        sandbox.cleanup()
        pool.close()
    rows = sorted(timeline.rows, key=lambda row: row[0])
    emit({"machine": info, "quick": args.quick, "unit": "s",
          "timeline": [{"start": s, "end": e, "what": w} for s, e, w in rows]})


if __name__ == "__main__":
    main()
