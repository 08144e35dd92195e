"""A running router's backends changed through its worker API, against each real router and pdtui's stand-in
(which must agree with them): a decode taken out while the other serves, and put back, with no router restart."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import threading

import pytest
from textual.widgets import Static

from pdtui.engine.checks.workers import key_refused
from pdtui.engine.events import Drained, Notice, StateChanged
from pdtui.engine.intent import Intent, Verb
from pdtui.engine.orchestrator import Orchestrator
from pdtui.engine.router_workers import RouterApiError, RouterWorker, RouterWorkers
from pdtui.faces.status_table import StatusBoard
from pdtui.hosts.http import HttpProber
from pdtui.hosts.local import LocalHost
from pdtui.sim.command_lines import SIM_ROUTER
from pdtui.sim.knobs import DEFAULT_MODEL
from pdtui.sim.load import Load, Tally
from pdtui.sim.ports import free_port
from pdtui.sim.unit_store import UnitStore
from pdtui.targets.registry import Registry
from pdtui.ui.app import PdtuiApp
from tests.engine_helpers import (
    FAST,
    READY_WITHIN,
    Recorder,
    bring_up,
    make_host,
    real_router_params,
    reference,
    router_argv,
    sim_deployment,
    worker_argv,
)

GENERATE = {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 4}}


def one_prefill_two_decodes(sandbox, package: str, *router_flags: str):
    p, d, d2, r, boot = (free_port() for _ in range(5))
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot), {"role": "prefill", "port": p, "timeout": READY_WITHIN}),
        "decode": (worker_argv("decode", d, bootstrap=boot), {"role": "decode", "port": d, "timeout": READY_WITHIN}),
        "decode2": (worker_argv("decode", d2, bootstrap=boot), {"role": "decode", "port": d2, "timeout": READY_WITHIN}),
        "router": ([*router_argv(r, [(p, boot)], [d, d2], package=package), *router_flags],
                   {"role": "router", "port": r, "timeout": READY_WITHIN}),
    }
    return sim_deployment(sandbox, services), (p, d, d2, r)


def board_of(rec) -> StatusBoard:
    """``status --once``'s board, fed what a run told."""
    board = StatusBoard()
    for event in rec.events:
        board(event)
    return board


async def until_listed_healthy(api: RouterWorkers, url: str, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not any(w.url == url and w.healthy for w in await api.listed()):
            await asyncio.sleep(0.2)


@pytest.fixture(params=[*real_router_params(), SIM_ROUTER])
def router(request) -> str:
    return request.param


async def test_a_decode_taken_out_and_put_back_while_the_router_serves(sandbox, router):
    deployment, (p, d, d2, r) = one_prefill_two_decodes(sandbox, router)
    done, _, _ = await bring_up(deployment)
    assert done.ok, done
    prober = HttpProber(LocalHost())
    api = RouterWorkers("router", prober, r, "127.0.0.1")
    workers = await api.listed()
    assert sorted((w.role, w.url) for w in workers) == sorted(
        [("prefill", f"http://127.0.0.1:{p}"), ("decode", f"http://127.0.0.1:{d}"), ("decode", f"http://127.0.0.1:{d2}")])
    prefill = next(w for w in workers if w.role == "prefill")
    assert prefill.bootstrap_port is not None and prefill.body()["bootstrap_port"] == prefill.bootstrap_port
    decode = next(w for w in workers if w.url.endswith(f":{d}"))

    await api.remove(decode)
    assert await api.until_gone(decode.url, timeout=30)
    assert [w.url for w in await api.listed() if w.role == "decode"] == [f"http://127.0.0.1:{d2}"]
    for _ in range(4):      # the other decode serves every request meanwhile
        answer = await prober.request("POST", r, "/generate", body=GENERATE)
        assert answer.status == 200, answer.describe()

    await api.add(decode)
    await until_listed_healthy(api, decode.url)
    assert len(await api.listed()) == 3
    answer = await prober.request("POST", r, "/generate", body=GENERATE)
    assert answer.status == 200, answer.describe()


async def test_a_router_with_an_api_key_refuses_in_one_line(sandbox, router):
    deployment, (_, _, _, r) = one_prefill_two_decodes(sandbox, router, "--api-key", "s3cret")
    done, _, _ = await bring_up(deployment)     # fails the router (its /workers wants the key): it keeps running
    assert not done.ok
    api = RouterWorkers("router", HttpProber(LocalHost()), r, "127.0.0.1")
    with pytest.raises(RouterApiError) as refused:
        await api.listed()
    assert str(refused.value) == f"router: GET /workers answered 401: {key_refused(None)}"
    keyed = RouterWorkers("router", HttpProber(LocalHost()).with_key("s3cret"), r, "127.0.0.1", key_env="KEY")
    async with asyncio.timeout(20):     # smg takes its workers one by one once its port answers, the 401 at once
        while len(await keyed.listed()) < 3:
            await asyncio.sleep(0.2)
    assert len(await keyed.listed()) == 3


class Traffic:
    """The sim's load generator sending through the router from a thread: answered and failed counted."""

    def __init__(self, port: int) -> None:
        self.stop, self.out = threading.Event(), io.StringIO()
        self.tally = Tally(self.out)
        self.thread = threading.Thread(target=Load(f"http://127.0.0.1:{port}", DEFAULT_MODEL, 6.0, 3, self.stop,
                                                   self.tally).run, daemon=True)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.tally.close()


async def under_load(deployment, port: int, intent: Intent):
    """``intent`` carried out on the running ``deployment`` while the sim's load goes through its router."""
    with Traffic(port) as traffic:
        await asyncio.sleep(2.0)
        done, rec, _ = await bring_up(deployment, intent=intent)
        await asyncio.sleep(2.0)
    return done, rec, traffic


def lost_nothing(traffic: Traffic, rec) -> None:
    assert traffic.tally.failed == 0, traffic.out.getvalue() + "\n".join(n.text for n in rec.of(Notice))
    assert traffic.tally.answered >= 2, traffic.out.getvalue()       # answers before, during and after


async def test_a_decode_restarted_under_load_is_drained_first_and_no_request_fails(sandbox, router):
    deployment, (_, _, _, r) = one_prefill_two_decodes(sandbox, router)
    done, _, _ = await bring_up(deployment)
    assert done.ok, done
    done, rec, traffic = await under_load(deployment, r, Intent(Verb.RESTART, ("decode",)))
    assert done.ok, done
    said = [n.text for n in rec.of(Notice) if n.service == "decode"]
    assert said[0] == "decode: taking it out of router (drain, at most 2m)"
    assert said[1].startswith("decode: out of router"), said
    assert said[-1] == "decode: back in router"
    assert "pending" not in [e.new.value for e in rec.of(StateChanged) if e.service == "router"]
    lost_nothing(traffic, rec)


async def test_a_rolling_restart_of_both_decodes_under_load_loses_no_request(sandbox, router):
    deployment, (_, d, d2, r) = one_prefill_two_decodes(sandbox, router)
    done, _, _ = await bring_up(deployment)
    assert done.ok, done
    done, rec, traffic = await under_load(deployment, r, Intent(Verb.RESTART, ("decode", "decode2"), rolling=True))
    assert done.ok, done
    said = [n.text for n in rec.of(Notice) if n.service in ("decode", "decode2")]
    assert said.index("decode: back in router") < said.index("decode2: taking it out of router (drain, at most 2m)")
    assert said[-1] == "decode2: back in router"
    assert [e.new.value for e in rec.of(StateChanged) if e.service == "router"] == ["waiting", "ready"]
    lost_nothing(traffic, rec)


async def test_a_rolling_restart_of_the_prefill_with_dependents_restarts_both_decodes_before_it_goes_back(sandbox,
                                                                                                         router):
    deployment, (p, _, _, r) = one_prefill_two_decodes(sandbox, router)
    assert (await bring_up(deployment))[0].ok
    done, rec, _ = await bring_up(deployment, intent=Intent(Verb.RESTART, ("prefill",), rolling=True,
                                                            with_dependents=True))
    assert done.ok, done
    said = [n.text for n in rec.of(Notice)]
    assert "router: prefill is its only prefill: it answers 503 while prefill is out, and serves again once it is back" \
        in said
    assert said.index("decode2: back in router") < said.index("prefill: back in router")
    assert not {"stopping", "starting"} & set(rec.states("router")), "the router is never restarted"
    listed = await RouterWorkers("router", HttpProber(LocalHost()), r, "127.0.0.1").listed()
    prefill = next(w for w in listed if w.url == f"http://127.0.0.1:{p}")
    assert prefill.bootstrap_port is not None and len(listed) == 3
    answer = await HttpProber(LocalHost()).request("POST", r, "/generate", body=GENERATE)
    assert answer.status == 200, answer.describe()


async def test_down_of_one_decode_under_load_drains_it_first_and_no_request_fails(sandbox, router):
    deployment, (_, _, d2, r) = one_prefill_two_decodes(sandbox, router)
    done, _, _ = await bring_up(deployment)
    assert done.ok, done
    done, rec, traffic = await under_load(deployment, r, Intent(Verb.DOWN, ("decode2",)))
    listed = [w.url for w in await RouterWorkers("router", HttpProber(LocalHost()), r, "127.0.0.1").listed()]
    assert done.ok, done
    assert [e.new.value for e in rec.of(StateChanged) if e.service == "decode2"][-2:] == ["stopping", "stopped"]
    assert f"http://127.0.0.1:{d2}" not in listed and len(listed) == 2
    assert [e.new.value for e in rec.of(StateChanged) if e.service == "router"] == ["waiting", "ready"]
    lost_nothing(traffic, rec)


async def test_up_after_a_down_of_one_decode_starts_it_and_puts_it_back_in_the_running_router(sandbox, router):
    deployment, (_, _, d2, r) = one_prefill_two_decodes(sandbox, router)
    assert (await bring_up(deployment))[0].ok
    assert (await bring_up(deployment, intent=Intent(Verb.DOWN, ("decode2",))))[0].ok
    _, watched, _ = await bring_up(deployment, intent=Intent(Verb.STATUS))
    board = board_of(watched)
    assert "router routes to: prefill, decode" in board.table().splitlines()
    assert "router lacks: decode2 (in the config, not among its workers)" in board.table().splitlines()
    router = next(s for s in json.loads(board.as_json())["services"] if s["name"] == "router")
    assert router["lacking"] == ["decode2"] and [w["service"] for w in router["workers"]] == ["prefill", "decode"]
    done, rec, _ = await bring_up(deployment)
    assert done.ok, done
    assert "router: decode2 is not among its workers (its unit does not name it): added through its worker API" in [
        n.text for n in rec.of(Notice) if n.service == "router"]
    listed = await RouterWorkers("router", HttpProber(LocalHost()), r, "127.0.0.1").listed()
    assert any(w.url == f"http://127.0.0.1:{d2}" and w.healthy for w in listed)


async def test_status_names_a_worker_the_router_routes_to_that_the_config_does_not_name(sandbox, router):
    deployment, (_, _, _, r) = one_prefill_two_decodes(sandbox, router)
    assert (await bring_up(deployment))[0].ok
    api = RouterWorkers("router", HttpProber(LocalHost()), r, "127.0.0.1")
    boot = next(w.bootstrap_port for w in await api.listed() if w.role == "prefill")
    assert boot is not None
    extra = free_port()
    unit = sandbox.add_unit("t-extra", worker_argv("decode", extra, bootstrap=boot))     # the prefill's, as a peer
    subprocess.run([*sandbox.commands["systemctl"], "start", unit], check=True, timeout=30)
    prober = HttpProber(LocalHost())
    async with asyncio.timeout(30):        # registered only once healthy: smg tries a worker once when told of it
        while not (await prober.get(extra, "/health")).ok:
            await asyncio.sleep(0.2)
    url = f"http://127.0.0.1:{extra}"
    await api.add(RouterWorker(url, url, "decode", None, healthy=False, draining=False))
    await until_listed_healthy(api, url, timeout=30)
    worker_id = next(w.id for w in await api.listed() if w.url == url)
    done, rec, _ = await bring_up(deployment, intent=Intent(Verb.STATUS))
    assert done.ok, done
    drop = f"curl -X DELETE http://127.0.0.1:{r}/workers/{worker_id}"
    assert (f"router: it also routes to {url} (decode), which the config does not name; to drop it: "
            f"{drop}") in [n.text for n in rec.of(Notice)]
    board = board_of(rec)
    assert (f"router also routes to {url} (decode), which the config does not name; to drop it: {drop}"
            in board.table().splitlines())
    router = next(s for s in json.loads(board.as_json())["services"] if s["name"] == "router")
    assert {"url": url, "role": "decode", "healthy": True, "service": None, "drop": drop} in router["workers"]
    assert router["lacking"] == []


@pytest.mark.parametrize("package", real_router_params())
async def test_r_on_a_decode_of_the_two_decode_demo_drains_it_and_puts_it_back_while_the_load_goes_on(sandbox,
                                                                                                     package):
    deployment = reference(sandbox, shape="1p2d", router=package)
    assert (await bring_up(deployment))[0].ok
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
    rec = Recorder()
    orchestrator.subscribe(rec)
    app = PdtuiApp(orchestrator)
    router_port = deployment.services["router"].port
    with Traffic(router_port) as traffic:
        async with app.run_test(size=(160, 50)) as pilot:
            async with asyncio.timeout(60):
                while app.deployment.done is None:
                    await pilot.pause(0.1)
                await pilot.press("tab", "R")
                await pilot.pause(0.2)
                assert "drain: out of router" in str(app.screen.query_one(Static).render())
                await pilot.press("y")
                while not rec.of(Drained):
                    await pilot.pause(0.1)
            await orchestrator.close()
    [drained] = rec.of(Drained)
    assert (drained.service, drained.outcome) == ("decode-0", "back")
    assert not {"stopping", "starting", "pending"} & set(rec.states("router")), "the router served throughout"
    lost_nothing(traffic, rec)


def sandbox_invocation(sandbox, service: str) -> str:
    """The invocation of a test unit (``t-SERVICE``) as the stand-in systemd keeps it."""
    return UnitStore(sandbox.root).read_state(f"t-{service}.service").invocation


def generated_tokens(prober_answer) -> float:
    """A sim worker's ``sglang:generation_tokens_total`` from its /metrics answer."""
    for line in prober_answer.body.decode().splitlines():
        if line.startswith("sglang:generation_tokens_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_third_decode_added_to_a_running_1p2d_joins_the_running_router_and_requests_reach_it(sandbox,
                                                                                                   router):
    p, d, d2, d3, r, boot = (free_port() for _ in range(6))
    services = {
        "prefill": (worker_argv("prefill", p, bootstrap=boot), {"role": "prefill", "port": p, "timeout": READY_WITHIN}),
        "decode": (worker_argv("decode", d, bootstrap=boot), {"role": "decode", "port": d, "timeout": READY_WITHIN}),
        "decode2": (worker_argv("decode", d2, bootstrap=boot), {"role": "decode", "port": d2, "timeout": READY_WITHIN}),
        "router": ([*router_argv(r, [(p, boot)], [d, d2], package=router), "--policy", "round_robin"],
                   {"role": "router", "port": r, "timeout": READY_WITHIN}),
    }
    done, _, _ = await bring_up(sim_deployment(sandbox, services))
    assert done.ok, done
    router_invocation = sandbox_invocation(sandbox, "router")
    services["decode3"] = (worker_argv("decode", d3, bootstrap=boot, extra=("--enable-metrics",)),
                           {"role": "decode", "port": d3, "timeout": READY_WITHIN})
    done, rec, _ = await bring_up(sim_deployment(sandbox, services))      # the config grown by one: up again
    assert done.ok, done
    assert "router: decode3 is not among its workers (its unit does not name it): added through its worker API" in [
        n.text for n in rec.of(Notice)]
    assert sandbox_invocation(sandbox, "router") == router_invocation, "the router is never restarted"
    prober = HttpProber(LocalHost())
    before = generated_tokens(await prober.get(d3, "/metrics"))
    for n in range(12):
        answer = await prober.request("POST", r, "/generate", body={**GENERATE, "text": f"request {n}"})
        assert answer.status == 200, answer.describe()
    assert generated_tokens(await prober.get(d3, "/metrics")) > before, "no request reached decode3"
