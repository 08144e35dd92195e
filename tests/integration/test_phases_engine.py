"""The engine tells each backend's start-up phases as the sim worker of every generation prints them."""

from __future__ import annotations

import pytest

from pdtui.engine.events import PhaseStarted
from pdtui.headless import LinePrinter, to_json
from pdtui.sim.knobs import GENERATIONS
from tests.engine_helpers import bring_up, reference

EXPECTED = {
    "older": ["distributed", "weights", "kv_cache", "cuda_graphs", "http", "warmup", "ready"],
    "2025": ["distributed", "weights", "kv_cache", "cuda_graphs", "http", "warmup", "ready"],
    "current": ["weights", "kv_cache", "cuda_graphs", "http", "warmup", "ready"],
}


@pytest.mark.parametrize("generation", GENERATIONS)
async def test_each_backend_tells_its_generations_phases_in_order_dated_by_the_journal(sandbox, generation):
    done, rec, _ = await bring_up(reference(sandbox, generation=generation))
    assert done.ok
    phases = rec.of(PhaseStarted)
    for service in ("prefill", "decode"):
        mine = [p for p in phases if p.service == service]
        assert [p.phase for p in mine] == EXPECTED[generation]
        stamps = [p.at for p in mine]
        assert all(at is not None for at in stamps) and stamps == sorted(stamps)
        assert rec.events.index(mine[-1]) < rec.index(service, "ready")
    assert not [p for p in phases if p.service == "router"]


async def test_phases_are_told_as_lines_and_json(sandbox):
    _, rec, _ = await bring_up(reference(sandbox))
    first = rec.of(PhaseStarted)[0]
    printer = LinePrinter()
    printer.width = 8
    assert printer.format(first).endswith(f"{first.service:<8} phase weights")
    assert to_json(first).startswith('{"kind": "phase", "service": "' + first.service + '", "phase": "weights"')
