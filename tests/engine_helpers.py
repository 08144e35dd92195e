"""Running the orchestrator against a simulated deployment, and reading what it said."""

from __future__ import annotations

from pdtui import demo
from pdtui.engine.events import Done, StateChanged
from pdtui.engine.orchestrator import Orchestrator, Timing
from pdtui.hosts import make_host

FAST = Timing(poll=0.1, unit_poll=0.5, settle=0.2, log_batch=0.02)


class Recorder:
    """Subscribes to an orchestrator and keeps every event."""

    def __init__(self) -> None:
        self.events: list = []

    def __call__(self, event) -> None:
        self.events.append(event)

    def states(self, service: str) -> list[str]:
        return [e.new.value for e in self.events if isinstance(e, StateChanged) and e.service == service]

    def change(self, service: str, state: str) -> StateChanged:
        return next(e for e in self.events
                    if isinstance(e, StateChanged) and e.service == service and e.new.value == state)

    def index(self, service: str, state: str) -> int:
        return self.events.index(self.change(service, state))

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


def reference(sandbox, *, failures=None, startup=0.5, timeout="30s"):
    return demo.build(sandbox, demo.DemoOptions(failures or {}, startup, timeout))


async def bring_up(deployment, *, smoke=True, timing=FAST) -> tuple[Done, Recorder, Orchestrator]:
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, make_host, smoke=smoke, timing=timing)
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
    return done, recorder, orchestrator
