"""The headless printers' contract beyond the lines themselves."""

from __future__ import annotations

from pdtui.engine.events import Done, GpuSample, Notice
from pdtui.headless import UntilDone


def test_nothing_is_printed_after_the_done():
    printed: list = []
    gate = UntilDone(printed.append)
    events = [Notice("info", "before"), Done(ok=True, exit_code=0), GpuSample("gpu0", ()), Notice("info", "after")]
    for event in events:
        gate(event)
    assert printed == events[:2]
