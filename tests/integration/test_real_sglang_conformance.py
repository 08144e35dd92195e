"""The sim's worker (its ``current`` generation) against real SGLang 0.5.23, started with the same flags.

Real SGLang runs as pdtui brings it up (tests/real_sglang.py), the sim as the
same command lines with the sim's worker in place of SGLang's server, both
behind the real smg router. What pdtui reads of a server must agree: the phases
it recognizes in its lines and in which order, the lines it waits for (the
bootstrap server's, the warm-up's, the ready line), that no line of either is
taken for a failure, ``/health``, the fields of ``/server_info`` and
``/get_server_info`` pdtui reads, the ``/metrics`` families it reads, and the
shape of a generation's answer through the router.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pdtui.config import Deployment
from pdtui.engine.checks.generation import judge, request_body
from pdtui.engine.readiness import LineJudge
from pdtui.hosts.http import HttpResult
from pdtui.servers.arguments import MARK, EngineArguments, probe_program, resolve
from pdtui.servers.sglang import arguments as sglang_arguments
from pdtui.servers.sglang import launch, metrics
from pdtui.servers.sglang.pairing import RUNNING
from pdtui.servers.sglang.phases import PhaseTracker
from pdtui.servers.sglang.signatures import signatures_for
from pdtui.sim import real_sglang, worker
from pdtui.sim.systemd_host import SystemdHost
from tests.conftest_sim import Procs, fetch
from tests.engine_helpers import bring_up
from tests.real_sglang import ONE_ENGINE_AT_A_TIME, UNITS, sglang_deployment
from tests.systemd_host import install

pytestmark = ONE_ENGINE_AT_A_TIME

SERVERS = ("prefill", "decode")
# The lines pdtui waits for or shows as evidence, in the order a 0.5.23 prefill prints them.
KEY_LINES = {
    "prefill": ["CommonKVBootstrapServer started successfully on", "Init parallel begin.", "Load weight begin",
                "KV Cache is allocated", "Engine startup timings (s):", "Uvicorn running on",
                "Start of pd disaggregation warmup ...", "Disaggregation warmup requests completed for all 1 DP ranks",
                "End of disaggregation warmup", "The server is fired up and ready to roll!"],
    "decode": ["Init parallel begin.", "Load weight begin", "KV Cache is allocated", "Engine startup timings (s):",
               "Uvicorn running on", "Start of pd disaggregation warmup ...",
               "Disaggregation warmup requests completed for all 1 DP ranks", "End of disaggregation warmup",
               "The server is fired up and ready to roll!"],
}
INFO_KEYS = (*(key for key, _ in RUNNING), "version")
FAMILIES = (metrics.RUNNING, metrics.QUEUED, metrics.TOKEN_USAGE, metrics.GEN_THROUGHPUT, metrics.PROMPT_TOKENS,
            metrics.GENERATION_TOKENS, *metrics.KV_FAMILIES)
# Long enough that the decode logs a batch (every 40 decode steps): 0.5.23 sets its scheduler's gauges there.
def long_answer(model: Path) -> dict[str, Any]:
    return {**request_body(str(model), "Say OK."), "max_tokens": 64, "ignore_eos": True}


ANSWER_PATHS = ("choices.0.message.content", "choices.0.message.role", "choices.0.finish_reason",
                "usage.prompt_tokens", "usage.completion_tokens", "usage.total_tokens", "model")


@dataclass
class Seen:
    """What pdtui reads of one deployment's servers."""

    lines: dict[str, list[str]] = field(default_factory=dict)
    health: dict[str, int] = field(default_factory=dict)
    info: dict[str, dict[str, Any]] = field(default_factory=dict)
    old_info: dict[str, set[str]] = field(default_factory=dict)
    families: dict[str, set[str]] = field(default_factory=dict)
    answer: HttpResult | None = None
    bootstrap: int | None = None

    def phases(self, server: str) -> list[str]:
        tracker = PhaseTracker()
        return [phase for line in self.lines[server] if (phase := tracker.feed(line)) is not None]


def read(seen: Seen, deployment: Deployment, model: Path) -> None:
    """Each server's endpoints, then a generation through the router (the KV series appear with it)."""
    router = deployment.services["router"].port
    seen.bootstrap = deployment.services["prefill"].bootstrap_port
    answer: tuple[int, bytes] = (0, b"")
    deadline = time.monotonic() + 60
    while answer[0] != 200 and time.monotonic() < deadline:     # the router activates its workers on its own time
        answer = fetch(f"http://127.0.0.1:{router}/v1/chat/completions", "POST", long_answer(model), timeout=60)
        time.sleep(0.5 if answer[0] != 200 else 0)
    seen.answer = HttpResult(answer[0], answer[1], 0.0)
    time.sleep(1)       # a prefill counts its transfer as it completes
    for name in SERVERS:
        port = deployment.services[name].port
        seen.health[name] = fetch(f"http://127.0.0.1:{port}/health", timeout=30)[0]
        seen.info[name] = json.loads(fetch(f"http://127.0.0.1:{port}/server_info")[1])
        seen.old_info[name] = set(json.loads(fetch(f"http://127.0.0.1:{port}/get_server_info")[1]))
        text = fetch(f"http://127.0.0.1:{port}/metrics")[1].decode()
        seen.families[name] = {f.name for f in text_string_to_metric_families(text)} & set(FAMILIES)


async def real(host: SystemdHost, folder: Path, model: Path) -> Seen:
    deployment = sglang_deployment(host, folder, model)
    seen = Seen()
    with host.network():
        await install(deployment)
        done, _, _ = await bring_up(deployment, smoke=False)
        assert done.ok, done
        read(seen, deployment, model)
    for name in SERVERS:
        seen.lines[name] = host.run("journalctl", "-u", UNITS[name], "-o", "cat", "--no-pager").stdout.splitlines()
    return seen


def sim(folder: Path, model: Path, procs: Procs, host: SystemdHost) -> Seen:
    """The same command lines (new ports), the sim's worker in place of SGLang's server, smg in front."""
    deployment = sglang_deployment(host, folder, model)
    seen, outputs = Seen(), {}
    for name in (*SERVERS, "router"):
        svc = deployment.services[name]
        argv = launch.command_line(deployment, svc, svc.launch.prometheus_port if svc.launch else None)
        if name != "router":
            server = argv.index("sglang.launch_server")
            argv = [sys.executable, "-m", "pdtui.sim.worker", *argv[server + 1:], "--startup", "1"]
        outputs[name] = folder / f"{name}.log"
        procs.start(argv, stdout=outputs[name].open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not all("fired up" in outputs[n].read_text() for n in SERVERS) and time.monotonic() < deadline:
        time.sleep(0.1)
    read(seen, deployment, model)
    for name in SERVERS:
        seen.lines[name] = outputs[name].read_text().splitlines()
    return seen


def paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        return {p for key, item in value.items() for p in paths(item, f"{prefix}{key}.")} | {prefix.rstrip(".")}
    if isinstance(value, list) and value:
        return paths(value[0], f"{prefix}0.") | {prefix.rstrip(".")}
    return {prefix.rstrip(".")}


async def test_the_sims_current_generation_reads_as_real_0_5_23_does(sglang_host, tmp_path, tiny_model, procs):
    (tmp_path / "real").mkdir()
    (tmp_path / "sim").mkdir()
    want = await real(sglang_host, tmp_path / "real", tiny_model)
    got = sim(tmp_path / "sim", tiny_model, procs, sglang_host)
    for name in SERVERS:
        assert got.phases(name) == want.phases(name) == ["distributed", "weights", "kv_cache", "http", "warmup",
                                                         "ready"], name
        for seen in (want, got):
            at = [next((i for i, line in enumerate(seen.lines[name]) if key in line), -1) for key in KEY_LINES[name]]
            assert -1 not in at and at == sorted(at), (name, dict(zip(KEY_LINES[name], at, strict=True)))
            fatal = LineJudge(None, signatures_for(name)).failure
            judged = [line for line in seen.lines[name] if fatal(line) is not None]
            assert judged == [], (name, judged)
        assert got.health[name] == want.health[name] == 200
        assert {k: got.info[name].get(k, "absent") for k in INFO_KEYS} == {
            k: want.info[name].get(k, "absent") for k in INFO_KEYS}, name
        assert set(INFO_KEYS) <= got.old_info[name] and set(INFO_KEYS) <= want.old_info[name]
        for seen in (want, got):      # a prefill's bootstrap port as configured; SGLang's default on a decode
            assert seen.info[name]["disaggregation_bootstrap_port"] == (seen.bootstrap if name == "prefill" else 8998)
        assert got.families[name] == want.families[name], name
    assert want.answer is not None and got.answer is not None
    assert judge(want.answer).ok and judge(got.answer).ok, (want.answer.body, got.answer.body)
    real_paths, sim_paths = paths(want.answer.json()), paths(got.answer.json())
    assert {p for p in ANSWER_PATHS if p in real_paths} == {p for p in ANSWER_PATHS if p in sim_paths}, (
        real_paths ^ sim_paths)


def test_the_sims_flags_are_sglangs_as_its_installed_parser_reads_them():
    """Every flag of the sim's parser but its own knobs is one SGLang 0.5.23's parser reads (itself, or a long flag
    cut short as argparse takes it: --tp), taking a value where SGLang's takes one: the demo's flag check, answered
    by the sim's parser, refuses what the real engine would. No server runs: SGLang's parser alone (8-10 s)."""
    reason = real_sglang.missing_reason()
    if reason:
        pytest.skip(f"no real SGLang: {reason}")
    done = subprocess.run([str(real_sglang.python()), "-c", probe_program(sglang_arguments.PROBE),
                           ",".join(sglang_arguments.DISTRIBUTIONS), ""], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, cwd="/")
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    real = EngineArguments.from_answer("sglang", json.loads(line.removeprefix(MARK)))
    assert real.label == f"sglang {real_sglang.VERSION}"
    differ = {}
    for action in worker.build_parser()._actions:
        for flag in (f for f in action.option_strings if f not in worker.SIM_ONLY and f not in ("-h", "--help")):
            found, why = resolve(flag, real)
            if found is None or (real.options[found].nargs == 0) != (action.nargs == 0):
                differ[flag] = why or f"{found} takes nargs {real.options[found].nargs}, the sim's {action.nargs}"
    assert differ == {}
