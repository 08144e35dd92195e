"""Serving figures of the servers a face shows, sampled through the host, only while shown and serving."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
from collections.abc import AsyncIterator

from pdtui.engine.events import LogLines, ServingFigures
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.sim.ports import free_port
from pdtui.targets.registry import Registry
from tests.engine_helpers import FAST, Recorder, reference, router_argv, sim_deployment, worker_argv

QUICK = dataclasses.replace(FAST, figures_poll=0.2)


def figures(recorder: Recorder, service: str | None = None) -> list[ServingFigures]:
    return [e for e in recorder.of(ServingFigures) if service is None or e.service == service]


@contextlib.asynccontextmanager
async def brought_up(deployment, timing=QUICK) -> AsyncIterator[tuple[Recorder, Orchestrator]]:
    """A deployment brought up, nothing fetched yet (no face has shown a panel); closed after."""
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=timing)
    orchestrator.subscribe(recorder)
    try:
        done = await orchestrator.run()
        assert done.ok, done.failures
        await asyncio.sleep(QUICK.figures_poll * 3)
        assert not figures(recorder), "nothing is fetched before a face shows a panel"
        yield recorder, orchestrator
    finally:
        await orchestrator.close()


async def until(condition, limit: float = 30.0) -> None:
    async with asyncio.timeout(limit):
        while not condition():
            await asyncio.sleep(0.05)


def without_metrics(sandbox):
    """prefill, decode and the router, the servers started without --enable-metrics."""
    p, d, r, boot = (free_port() for _ in range(4))
    return sim_deployment(sandbox, {
        "prefill": (worker_argv("prefill", p, bootstrap=boot), {"role": "prefill", "port": p}),
        "decode": (worker_argv("decode", d, bootstrap=boot), {"role": "decode", "port": d}),
        "router": (router_argv(r, [(p, boot)], [d], package="sim"), {"role": "router", "port": r}),
    })


async def test_a_server_with_metrics_gives_its_figures_from_them_under_the_demos_load(sandbox):
    async with brought_up(reference(sandbox)) as (rec, orchestrator):
        orchestrator.show_figures(["decode", "prefill"])
        await until(lambda: len(figures(rec, "decode")) >= 3 and len(figures(rec, "prefill")) >= 3)
        await until(lambda: any(f.figures.kv_gbps for f in figures(rec, "prefill")))
    sent = next(f.figures for f in figures(rec, "prefill") if f.figures.kv_gbps)
    assert sent.kv_failed == 0, "the prefill's KV transfers under load, none failed"
    decode = figures(rec, "decode")[-1]
    assert decode.source == "metrics" and decode.hint == ""
    assert decode.figures.generation_tps is not None and decode.figures.token_usage is not None
    assert decode.figures.running is not None and decode.figures.queued is not None
    assert figures(rec, "prefill")[-1].figures.prompt_tps is not None, "a rate once two samples were read"
    assert not figures(rec, "router"), "only what is shown is fetched"


async def test_pdtuis_own_polling_is_folded_out_of_the_servers_lines_and_its_journal_keeps_it(sandbox):
    deployment = reference(sandbox)
    async with brought_up(deployment, dataclasses.replace(QUICK, watch_poll=0.2)) as (rec, orchestrator):
        orchestrator.show_figures(["decode"])
        await until(lambda: len(figures(rec, "decode")) >= 3)
    unit = deployment.services["decode"].unit
    journal = subprocess.run([*sandbox.commands["journalctl"], "--output=cat", "--no-pager", f"--unit={unit}"],
                             capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()
    shown = [record.text for event in rec.of(LogLines) if event.service == "decode" for record in event.lines]
    for path in ("/metrics", "/ready"):       # its health, asked where it does not generate
        assert any(f'"GET {path}?from=pdtui HTTP/1.1" 200 OK' in line for line in journal), f"no {path} in the journal"
    assert not [line for line in shown if "from=pdtui" in line], "pdtui's own polling reached the panel"
    assert any("Decode batch" in line for line in shown), "the server's own lines are shown"
    assert len(shown) < len(journal)


async def test_without_metrics_the_batch_lines_give_the_figures_and_only_while_shown(sandbox):
    async with brought_up(without_metrics(sandbox)) as (recorder, orchestrator):
        orchestrator.show_figures(["decode"])
        await until(lambda: len(figures(recorder, "decode")) >= 2)
        decode = figures(recorder, "decode")[-1]
        assert decode.source == "log" and decode.hint == "TTFT needs --enable-metrics"
        assert decode.figures.generation_tps is not None and decode.figures.running is not None
        assert not figures(recorder, "prefill") and not figures(recorder, "router"), "only decode is shown"
        orchestrator.show_figures([])
        await asyncio.sleep(QUICK.figures_poll * 2)   # a sample under way when it was asked still lands
        seen = len(figures(recorder))
        await asyncio.sleep(QUICK.figures_poll * 3)
        assert len(figures(recorder)) == seen, "nothing is fetched once no panel is shown"


async def test_a_router_with_a_generated_unit_is_read_at_its_prometheus_port(sandbox, real_router):
    async with brought_up(reference(sandbox, router=real_router)) as (recorder, orchestrator):
        orchestrator.show_figures(["router"])
        await until(lambda: len(figures(recorder, "router")) >= 2)
    router = figures(recorder, "router")[-1]
    assert router.source == "metrics"
    assert router.figures.open_circuits == 0 and router.figures.requests_ps is not None
    assert router.figures.running is not None
