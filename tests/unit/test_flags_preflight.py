"""The preflight's flag check in this process, on in-memory hosts and a fake clock (pdtui/engine/checks/flags.py).

The memory host answers the engine's Python with what the probe printed for the installed SGLang 0.5.23
(tests/fixtures): the full answer when it is asked without a version, the version alone when asked with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from pdtui.engine.events import Done, Notice, PreflightFinding
from pdtui.engine.intent import Intent, Verb
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts.base import Result
from pdtui.servers.arguments import MARK
from pdtui.sim.memhost import MemoryFleet, MemoryHost
from pdtui.targets.registry import Registry
from tests.engine_helpers import Recorder, pd_deployment

pytestmark = pytest.mark.looptime

PYTHON = "/opt/sglang/bin/python"
ANSWER = (Path(__file__).resolve().parents[1] / "fixtures" / "sglang-0.5.23-arguments.json").read_text().strip()


@pytest.fixture
def asked(monkeypatch, tmp_path) -> list[list[str]]:
    """Every command the engine's Python was given; the answers kept in a cache folder of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls: list[list[str]] = []
    run = MemoryHost.run

    async def answering(host, argv, **kwargs):
        if argv[0] != PYTHON:
            return await run(host, argv, **kwargs)
        calls.append(list(argv))
        await asyncio.sleep(9.0)         # an engine's imports take seconds, in the loop's time
        answer = '{"version":"0.5.23"}' if argv[-1] == "0.5.23" else ANSWER
        return Result(tuple(argv), 0, f"importing...\n{MARK}{answer}\n", "")

    monkeypatch.setattr(MemoryHost, "run", answering)
    return calls


def deployment(prefill_args: Sequence[str], python: str = PYTHON):
    launch = {"python": python, "model": "/models/dsv3", "transfer_backend": "mooncake"}
    return pd_deployment({"prefill": {"gpus": [0, 1], "port": 30000, "bootstrap_port": 8998,
                                      "launch": {**launch, "args": list(prefill_args)}}},
                         {"decode": {"gpus": [2, 3], "port": 30002, "launch": {**launch, "args": ["--enable-metrics"]}}},
                         name="flags", unit_prefix="sglang-")


async def bring_up(config, force: bool = False) -> tuple[Done, Recorder, MemoryFleet]:
    fleet = MemoryFleet(config, startup=30.0, router_startup=2.0)
    orchestrator = Orchestrator(config, Registry(fleet.host), clock=asyncio.get_running_loop().time,
                                intent=Intent(Verb.UP, force=force))
    rec = Recorder()
    orchestrator.subscribe(rec)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
        fleet.stop_all()
    return done, rec, fleet


def started(fleet: MemoryFleet) -> int:
    return fleet.counts["systemctl start"] + fleet.counts["systemctl restart"]


async def test_a_flag_of_another_release_is_refused_before_any_unit_starts_naming_its_line(asked):
    """--disaggregation-decode-tp: a flag of an earlier SGLang, gone in 0.5.23."""
    done, rec, fleet = await bring_up(deployment(["--enable-metrics", "--disaggregation-decode-tp", "2"]))
    reason = "flags.yaml:21:9: sglang 0.5.23 has no --disaggregation-decode-tp (did you mean '--disaggregation-mode'?)"
    assert done.exit_code == 1 and done.failures == {"prefill": reason}, done
    assert set(done.blocked) == {"decode", "router"}
    [finding] = rec.of(PreflightFinding)
    assert (finding.level, finding.check, finding.setting, finding.sources) == (
        "error", "flags", "--disaggregation-decode-tp", ("flags.yaml:21:9",))
    assert started(fleet) == 0
    assert len(asked) == 1, "one Python of one host, asked once for both servers"


async def test_a_value_outside_its_choices_is_refused_with_them_and_force_starts_despite_it(asked):
    config = deployment(["--attention-backend", "flash_mla"])
    done, rec, fleet = await bring_up(config)
    assert done.failures["prefill"] == ("flags.yaml:21:9: sglang 0.5.23 has no --attention-backend 'flash_mla' (did "
                                        "you mean 'flashmla'?): it takes triton, torch_native, flex_attention, dsa, "
                                        "nsa, qsa, dsv4, compressed, fa3, fa4, flashinfer, llada2_cfg_flashinfer, ...")
    assert started(fleet) == 0
    done, rec, fleet = await bring_up(config, force=True)
    assert done.ok, done
    assert any(n.text.startswith("--force: starting despite this: prefill: flags.yaml:21:9: sglang 0.5.23 has no "
                                 "--attention-backend 'flash_mla'") for n in rec.of(Notice))


async def test_the_second_bring_up_sends_the_version_it_kept_and_is_answered_by_the_version_alone(asked):
    config = deployment(["--enable-metrcs"])
    first, _, _ = await bring_up(config)
    second, _, _ = await bring_up(config)
    assert [argv[-1] for argv in asked] == ["", "0.5.23"]
    assert first.failures == second.failures == {
        "prefill": "flags.yaml:20:9: sglang 0.5.23 has no --enable-metrcs (did you mean '--enable-metrics'?)"}


async def test_an_engine_that_cannot_be_asked_is_said_and_refuses_nothing(asked):
    done, rec, fleet = await bring_up(deployment(["--no-such-flag"], python="/opt/elsewhere/python"))
    assert done.ok, done
    told = [n.text for n in rec.of(Notice) if n.level == "warning" and "flags were not checked" in n.text]
    assert sorted(told) == [f"{name}: its flags were not checked: /opt/elsewhere/python could not tell what sglang "
                            "takes: sh: 1: python: not found" for name in ("decode", "prefill")]
    assert not rec.of(PreflightFinding) and asked == []
