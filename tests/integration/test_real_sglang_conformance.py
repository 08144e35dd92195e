"""The sim's worker (its ``current`` generation) against real SGLang 0.5.23, started with the same flags.

Real SGLang runs as pdtui brought it up once for the tests that look at a
bring-up (tests/real_sglang.py's served_sglang), the sim as the same command
lines with the sim's worker in place of SGLang's server, both behind the real
sglang-router. What pdtui reads of a server must agree: the phases
it recognizes in its lines and in which order, the lines it waits for (the
bootstrap server's, the warm-up's, the ready line), that no line of either is
taken for a failure, ``/health`` and ``/ready``, the fields of ``/server_info`` and
``/get_server_info`` pdtui reads, the ``/metrics`` families it reads, and the
shape of a generation's answer through the router.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pdtui.engine.checks.generation import judge
from pdtui.engine.readiness import LineJudge
from pdtui.servers.arguments import MARK, EngineArguments, probe_program, resolve
from pdtui.servers.sglang import arguments as sglang_arguments
from pdtui.servers.sglang import launch
from pdtui.servers.sglang.pairing import RUNNING
from pdtui.servers.sglang.signatures import signatures_for
from pdtui.sim import real_sglang, worker
from pdtui.sim.systemd_host import SystemdHost
from tests.conftest_sim import Procs
from tests.real_sglang import ANSWER_PATHS, ONE_ENGINE_AT_A_TIME, SERVERS, Seen, Served, read, sglang_deployment

pytestmark = ONE_ENGINE_AT_A_TIME

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
def sim(folder: Path, model: Path, procs: Procs, host: SystemdHost) -> Seen:
    """The same command lines (new ports), the sim's worker in place of SGLang's server, the same router in
    front."""
    deployment = sglang_deployment(host, folder, model, router="sglang-router")
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


def test_the_sims_current_generation_reads_as_real_0_5_23_does(served_sglang: Served, tmp_path, tiny_model, procs):
    assert served_sglang.done.ok, served_sglang.done
    want = served_sglang.seen
    got = sim(tmp_path, tiny_model, procs, served_sglang.host)
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
        assert got.ready[name] == want.ready[name] == 200
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
