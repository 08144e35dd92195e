"""The engine tells each backend's start-up phases as the sim worker of every generation prints them."""

from __future__ import annotations

import pytest

from pdtui.commands.history import critical_path, report_text
from pdtui.engine.events import PhaseStarted
from pdtui.faces.headless import LinePrinter, to_json
from pdtui.faces.run_history import HistoryRecorder, connect, load_runs
from pdtui.sim.knobs import GENERATIONS
from tests.engine_helpers import bring_up, reference

EXPECTED = {
    "older": ["distributed", "weights", "kv_cache", "cuda_graphs", "http", "warmup", "ready"],
    "2025": ["distributed", "weights", "kv_cache", "cuda_graphs", "http", "warmup", "ready"],
    "current": ["distributed", "weights", "kv_cache", "cuda_graphs", "http", "warmup", "ready"],   # Init parallel
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
    assert printer.format(first).endswith(f"{first.service:<8} phase distributed")
    assert to_json(first).startswith('{"kind":"phase","service":"' + first.service + '","phase":"distributed"')


async def test_a_sim_bring_up_leaves_a_run_whose_report_waits_for_the_router_then_a_backend(sandbox, tmp_path):
    done, rec, _ = await bring_up(reference(sandbox, generation="2025"))
    recorder = HistoryRecorder(tmp_path / "h.sqlite3")
    for event in rec.events:
        recorder(event)
    [run] = load_runs(connect(tmp_path / "h.sqlite3", create=False))
    assert run.ok is done.ok is True
    for name in ("prefill", "decode"):
        service = run.services[name]
        assert service.outcome == "ready" and service.invocation
        assert list(service.durations()) == EXPECTED["2025"][:-1]
    chain = [s.name for s in critical_path(run)]
    assert chain[0] == "router" and chain[1] in ("prefill", "decode")
    print(report_text(run))
