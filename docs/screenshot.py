"""Make docs/screenshot.svg: the demo, brought up for real on the sim, as the TUI draws it; with ``--slurm``,
docs/screenshot-slurm.svg: the same as jobs on a private one-node Slurm cluster (root and Slurm needed)."""

from __future__ import annotations

import asyncio
import sys
from contextlib import AbstractContextManager
from pathlib import Path

from pdtui.config import Deployment
from pdtui.engine.events import Done
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.sim import demo
from pdtui.sim.sandbox import Sandbox
from pdtui.sim.slurm_cluster import PrivateCluster
from pdtui.ui.app import PdtuiApp

OUT = Path(__file__).with_name("screenshot.svg")
OUT_SLURM = Path(__file__).with_name("screenshot-slurm.svg")
OPTIONS = demo.DemoOptions({}, startup=2.0)


async def shoot(deployment: Deployment, out: Path, title: str) -> None:
    orchestrator = Orchestrator(deployment, make_host)
    done = asyncio.Event()
    orchestrator.subscribe(lambda event: done.set() if isinstance(event, Done) else None)
    app = PdtuiApp(orchestrator)
    async with app.run_test(size=(160, 44)) as pilot:
        await asyncio.wait_for(done.wait(), 60)
        await asyncio.sleep(1.5)
        await pilot.pause()
        out.write_text(app.export_screenshot(title=title))
        await orchestrator.close()
    print(out)


def main(slurm: bool) -> None:
    place: AbstractContextManager[Sandbox | PrivateCluster] = PrivateCluster.start() if slurm else Sandbox.create()
    with place as where:
        if isinstance(where, PrivateCluster):
            asyncio.run(shoot(demo.build_slurm(where, OPTIONS), OUT_SLURM, "pdtui demo --slurm"))
        else:
            asyncio.run(shoot(demo.build(where, OPTIONS), OUT, "pdtui demo"))


if __name__ == "__main__":
    main("--slurm" in sys.argv[1:])
