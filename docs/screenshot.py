"""Make docs/screenshot.svg: the demo, brought up for real on the sim, as the TUI draws it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pdtui import demo
from pdtui.engine.events import Done
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.sim.sandbox import Sandbox
from pdtui.ui.app import PdtuiApp

OUT = Path(__file__).with_name("screenshot.svg")


async def main() -> None:
    with Sandbox.create() as sandbox:
        orchestrator = Orchestrator(demo.build(sandbox, demo.DemoOptions({}, startup=2.0)), make_host)
        done = asyncio.Event()
        orchestrator.subscribe(lambda event: done.set() if isinstance(event, Done) else None)
        app = PdtuiApp(orchestrator)
        async with app.run_test(size=(160, 44)) as pilot:
            await asyncio.wait_for(done.wait(), 60)
            await asyncio.sleep(1.5)
            await pilot.pause()
            OUT.write_text(app.export_screenshot(title="pdtui demo"))
            await orchestrator.close()
    print(OUT)


if __name__ == "__main__":
    asyncio.run(main())
