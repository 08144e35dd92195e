"""The demo's shapes brought up for real: two prefills and two decodes behind one router, and a broken pair (a
decode that cannot reach the first prefill's bootstrap server) failing only the requests routed through it, named
by pdtui's pairs check in front of each real router."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from pdtui.cli import main
from pdtui.sim.knobs import DEFAULT_MODEL
from tests.conftest_sim import assert_nothing_left, fetch
from tests.engine_helpers import bring_up, real_router_params, reference

CHAT = {"model": DEFAULT_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
BACKENDS_2P2D = ("prefill-0", "prefill-1", "decode-0", "decode-1")
JOURNAL_LINE = re.compile(r"^\s*([\w-]+) \| (.*)$")    # a service's log line as --logs prints it


def demo(sandbox, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdtui", "demo", "--headless", "--startup", "0.5", "--sandbox",
                           str(sandbox), *args], capture_output=True, text=True, timeout=120)


def test_a_2p2d_demo_brings_four_backends_and_the_router_up(tmp_path):
    result = demo(tmp_path / "sb", "--shape", "2p2d")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "all ready" in out and "router    READY" in out
    for name in BACKENDS_2P2D:
        assert f"{name:<9} READY" in out
        assert out.index(f"{name:<9} READY") < out.index("router    starting")
    assert "workers: ok: 4 of 4 backends healthy" in out
    assert_nothing_left(tmp_path / "sb")


@pytest.mark.parametrize("router", [*real_router_params(), "sim"])
def test_a_broken_pair_is_named_and_fails_the_bring_up_while_every_server_stays_ready(tmp_path, router):
    sandbox = tmp_path / "sb"
    result = demo(sandbox, "--shape", "2p2d", "--fail", "decode-1:broken-pair", "--no-load", "--router", router)
    assert result.returncode == 1, result.stdout + result.stderr
    units, out = sandbox / "units", result.stdout
    config = (sandbox / "demo.yaml").read_text()
    first = next(line.split()[-1] for line in config.split("prefill-0:", 1)[1].splitlines() if "bootstrap_port" in line)
    assert f"--unreachable-bootstrap {first}" in (units / "sglang-dsv4-decode-1.service").read_text()
    for name in ("prefill-0", "prefill-1", "decode-0"):
        assert "--unreachable-bootstrap" not in (units / f"sglang-dsv4-{name}.service").read_text()
    named = (f"router    FAILED    pairs: decode-1 ✗ prefill-0: KV transfer failed: decode-1: KVTransferError: Could "
             f"not fetch prefill parallel info from bootstrap_addr: 127.0.0.1:{first}\n")
    assert named in out
    assert "✗ prefill-1" not in out and "decode-0 ✗" not in out, "only the broken pair is named"
    assert "router    FAILED" in out
    for name in BACKENDS_2P2D:
        assert f"{name:<9} FAILED" not in out, f"{name}: a broken pair fails requests, not the server"
    assert_nothing_left(sandbox)


async def test_a_broken_pair_fails_only_the_requests_routed_through_it(sandbox):
    deployment = reference(sandbox, failures={"decode-1": "broken-pair"}, shape="2p2d", router="sim")
    done, _, _ = await bring_up(deployment, smoke=False)
    assert done.ok, done
    services = deployment.services

    def through(decode: str, prefill: str, room: int) -> int:
        routed = {**CHAT, "bootstrap_host": "127.0.0.1", "bootstrap_port": services[prefill].bootstrap_port,
                  "bootstrap_room": room}
        return fetch(f"http://127.0.0.1:{services[decode].port}/v1/chat/completions", "POST", routed)[0]

    assert through("decode-1", "prefill-0", 1) == 500
    assert through("decode-1", "prefill-1", 2) == 200
    assert through("decode-0", "prefill-0", 3) == 200
    router = f"http://127.0.0.1:{services['router'].port}/v1/chat/completions"
    codes = [fetch(router, "POST", CHAT)[0] for _ in range(4)]
    assert sorted(codes) == [200, 200, 200, 500], "the router meets each of the four pairs once: one is broken"


def test_a_decode_on_another_page_size_is_refused_before_anything_starts_naming_both(tmp_path):
    sandbox = tmp_path / "sb"
    result = demo(sandbox, "--fail", "decode-1:page-size", "--shape", "1p2d", "--no-load", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    [finding] = [e for e in events if e["kind"] == "preflight"]
    assert (finding["level"], finding["check"], finding["service"], finding["setting"], finding["values"]) == (
        "error", "pair", "decode-1", "page size", ["64", "128"])
    assert finding["sources"] == ["its unit sglang-dsv4-prefill.service on gpu0",
                                  "its unit sglang-dsv4-decode-1.service on gpu0"]
    assert not [e for e in events if e["kind"] == "state" and e["state"] == "starting"], "nothing started"
    done = [e for e in events if e["kind"] == "done"][0]
    assert done["blocked"]["decode-0"] == "the preflight refused the servers as they would run"
    assert set(done["failures"]) == {"prefill", "decode-1"}, "the pair refused, both its ends"
    assert set(done["blocked"]) == {"decode-0", "router"}
    assert_nothing_left(sandbox)


def test_slurm_runs_the_reference_shape_only_said_in_one_line(capsys):
    assert main(["demo", "--slurm", "--headless", "--shape", "2p2d"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pdtui: demo --slurm runs the 1p1d shape only")


@pytest.mark.parametrize("fail, told", [
    ("decode:oom", "--fail decode:oom: the 1p2d demo has no service 'decode'; its prefills and decodes: prefill, "
                   "decode-0, decode-1"),
    ("prefill:broken-pair", "--fail prefill:broken-pair: broken-pair is a decode's"),
])
def test_a_fail_the_shape_cannot_play_is_a_usage_error_in_one_line(capsys, fail, told):
    assert main(["demo", "--headless", "--shape", "1p2d", "--fail", fail]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"pdtui: {told}")
