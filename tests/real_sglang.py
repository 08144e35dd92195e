"""Real SGLang on this machine's CPU (pdtui/sim/real_sglang.py), registered by tests/conftest.py.

``tiny_model`` makes the tiny GPT-2 once per test process, its tokenizer trained on
pdtui's own source. ``sglang_host`` lends a test the module's container
(tests/systemd_host.py's ``Kept``: booted once, left as a boot leaves it before
and after each test) with a network of its own, since real SGLang's torch store
and Mooncake bind every address, and the model bound in; a test reaches it from
inside that network (``with sglang_host.network():``). ``sglang_deployment`` writes a
prefill, a decode and a real router for it, each a unit made from its
``launch:`` block with the CPU flags. ``served_sglang`` is one such deployment
pdtui brought up once, with what was read of it at once, for the tests that only
look at a bring-up. Where SGLang or a container cannot run, the test skips,
saying why.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pdtui.config import Deployment, parse_config
from pdtui.engine.checks.generation import request_body
from pdtui.engine.events import Done
from pdtui.hosts.http import HttpResult
from pdtui.servers.sglang import metrics
from pdtui.servers.sglang.phases import PhaseTracker
from pdtui.sim import command_lines, real_sglang
from pdtui.sim.ports import free_port
from pdtui.sim.sandbox import Sandbox
from pdtui.sim.systemd_host import SystemdHost
from tests.conftest_sim import Procs, fetch
from tests.engine_helpers import Recorder, bring_up
from tests.sshd import made_ssh_home, use_home
from tests.systemd_host import Kept, booted, install, kept

__all__ = ["ANSWER_PATHS", "ONE_ENGINE_AT_A_TIME", "SERVERS", "UNITS", "Operated", "Seen", "Served", "active",
           "before_start_deployment", "pdtui", "read", "served_sglang", "sglang_deployment", "sglang_host", "sglang_machine",
           "tiny_model"]

# Real servers take most of the machine (two start in 7-9 GB and both cores): every test of either engine runs on one
# worker, so that SGLang's and vLLM's never start side by side (a real SGLang demo beside real vLLM's under the
# suite's load printed nothing for 78 s and timed out).
ONE_ENGINE_AT_A_TIME = pytest.mark.xdist_group("real_engines")
UNITS = {"prefill": "s-prefill.service", "decode": "s-decode.service", "router": "s-router.service"}
# Two real servers start side by side in ~30 s on two idle cores; the suite's other workers share those cores.
TIMEOUT = "4m"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = real_sglang.missing_reason()
    if reason:
        pytest.skip(f"no real SGLang: {reason}")
    return real_sglang.make_model(tmp_path_factory.mktemp("model"), real_sglang.corpus())


@pytest.fixture(scope="module")
def sglang_machine(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Kept]:
    with kept(tmp_path_factory.mktemp("sglang-machine"), "s-", private_network=True,
              binds={str(tiny_model): tiny_model}) as machine:
        yield machine


@pytest.fixture
def sglang_host(sglang_machine: Kept, monkeypatch: pytest.MonkeyPatch) -> Iterator[SystemdHost]:
    yield from sglang_machine.lent(monkeypatch)


def sglang_deployment(host: SystemdHost, folder: Path, model: Path, *, router: str = "smg", timeout: str = TIMEOUT,
                      prefill: Sequence[str] = (), decode: Sequence[str] = (),
                      transfer_backend: Mapping[str, str] | None = None, second_decode: bool = False,
                      keys: Mapping[str, Mapping[str, object]] | None = None,
                      servers: Sequence[str] = ("prefill", "decode"), **top: object) -> Deployment:
    """prefill, decode (real SGLang on the CPU) and ``router`` (a real router's package) on the container at
    ``host``, each a unit from its ``launch:`` block; ``prefill``/``decode``: more flags for that server;
    ``transfer_backend``: another, by role; ``second_decode``: a decode-1 beside decode; ``keys``: more keys of
    a service, by name; ``servers``: the servers it has (a test of one server's failure starts that one alone: a
    real server's start is half a minute of both cores)."""
    p, d, r, boot = (free_port() for _ in range(4))

    def server(role: str, extra: Sequence[str]) -> dict:
        launch = real_sglang.launch(role, model)
        backend = (transfer_backend or {}).get(role, launch["transfer_backend"])
        return {**launch, "transfer_backend": backend, "args": [*launch["args"], *extra]}

    config = {
        "name": "real-sglang", **top,
        "hosts": {"cpu0": {"address": "127.0.0.1", "port": host.port, "user": "root"}},
        "services": {
            "prefill": {"host": "cpu0", "unit": "s-prefill", "role": "prefill", "port": p, "bootstrap_port": boot,
                        "timeout": timeout, "launch": server("prefill", prefill)},
            "decode": {"host": "cpu0", "unit": "s-decode", "role": "decode", "port": d, "timeout": timeout,
                       "launch": server("decode", decode)},
            **({"decode-1": {"host": "cpu0", "unit": "s-decode-1", "role": "decode", "port": free_port(),
                             "timeout": timeout, "launch": server("decode", decode)}} if second_decode else {}),
            "router": {"host": "cpu0", "unit": "s-router", "role": "router", "port": r, "timeout": timeout,
                       "launch": {"package": router, "python": sys.executable, "host": "127.0.0.1",
                                  "prometheus_port": free_port()}},
        },
    }
    for name in ("prefill", "decode"):
        if name not in servers:
            del config["services"][name]
    for name, more in (keys or {}).items():
        config["services"][name].update(more)
    path = folder / "pdtui.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return parse_config(path.read_text(), str(path))


def before_start_deployment(sandbox: Sandbox, folder: Path, launches: Mapping[str, Mapping[str, object]],
                            engine: str = "sglang") -> Deployment:
    """A prefill and a decode of the real engine (``launches``: each one's ``launch:`` block) on the sandbox's
    simulated systemd (their units to be installed), for what is refused before anything starts: no server needs to
    run, nor a model to exist."""
    p, d, r, boot = (free_port() for _ in range(4))
    services = {
        "prefill": {"host": "cpu0", "unit": "f-prefill", "role": "prefill", "port": p, "launch": launches["prefill"],
                    **({"bootstrap_port": boot} if engine == "sglang" else {})},
        "decode": {"host": "cpu0", "unit": "f-decode", "role": "decode", "port": d, "launch": launches["decode"]},
        "router": {"host": "cpu0", "unit": "f-router", "role": "router", "port": r,
                   "launch": {"command": [sys.executable, "-S", "-m", "pdtui.sim.router"], "host": "127.0.0.1"}}}
    config = {"name": "flags", "engine": engine, "services": services,
              "hosts": {"cpu0": {"local": True, "commands": sandbox.commands, "unit_dir": str(sandbox.root / "units")}}}
    path = folder / "pdtui.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return parse_config(path.read_text(), str(path))


# -- one real deployment brought up once, for the tests that only look at it ------------------------------------

SERVERS = ("prefill", "decode")
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
    ready: dict[str, int] = field(default_factory=dict)     # /ready: /health's answer without its generation
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
        seen.ready[name] = fetch(f"http://127.0.0.1:{port}/ready")[0]
        seen.info[name] = json.loads(fetch(f"http://127.0.0.1:{port}/server_info")[1])
        seen.old_info[name] = set(json.loads(fetch(f"http://127.0.0.1:{port}/get_server_info")[1]))
        text = fetch(f"http://127.0.0.1:{port}/metrics")[1].decode()
        seen.families[name] = {f.name for f in text_string_to_metric_families(text)} & set(FAMILIES)


def pdtui(*args: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
    """``python -m pdtui ARGS`` as a user runs it (from the caller's network: inside ``host.network()``)."""
    env = {k: v for k, v in os.environ.items() if k != "PDTUI_CONFIG"}
    return subprocess.run([sys.executable, "-m", "pdtui", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


@dataclass
class Operated:
    """A user's operations on a served deployment, once it was read: ``pdtui status``, a decode restarted while a
    load goes through the router (what the load said as it stopped), then ``pdtui down`` and the units' states
    after it."""

    status: subprocess.CompletedProcess[str]
    restart: subprocess.CompletedProcess[str]
    load: str
    down: subprocess.CompletedProcess[str]
    after_down: list[str]


def operate(host: SystemdHost, deployment: Deployment, model: Path) -> Operated:
    """Status, a restart of ``decode`` under load (its twin decode-1 serves meanwhile), then down."""
    config, router = deployment.source, deployment.services["router"].port
    procs = Procs()
    try:
        load = procs.start([sys.executable, "-m", "pdtui.sim.load", "--url", f"http://127.0.0.1:{router}",
                            "--model", str(model), "--rate", "1", "--concurrency", "2"])
        status = pdtui("status", config, "--once", "--json")
        restart = pdtui("restart", config, "decode", "--headless")
        time.sleep(3)           # the load goes on through the decode back in the router
        procs.stop(load)
        said = load.stdout.read() if load.stdout else ""
    finally:
        procs.stop_all()
    down = pdtui("down", config, "--headless")
    return Operated(status, restart, said, down, [active(host, unit) for unit in deployment_units(deployment)])


def active(host: SystemdHost, unit: str) -> str:
    return host.run("systemctl", "show", "-p", "ActiveState", "--value", unit).stdout.strip()


def deployment_units(deployment: Deployment) -> list[str]:
    return [service.unit for service in deployment.services.values() if service.unit]


@dataclass
class Served:
    """Real SGLang that pdtui brought up once behind sglang-router (prefill, two decodes, router), what was read of
    it at once (the bring-up's events, its units' states, and the servers' answers and lines a conformance test
    holds the sim to), and then what a user's operations on it gave (status, a drained restart under load, down).
    The tests that look at a bring-up or operate it share it (a real bring-up is a minute of both cores); its
    container is stopped once all is done, so that idle servers hold no memory beside the tests after it."""

    host: SystemdHost               # stopped: its port and folders name it in a config
    deployment: Deployment
    done: Done
    rec: Recorder
    active: list[str]
    seen: Seen
    operated: Operated | None       # None when the bring-up failed


@pytest.fixture(scope="session")
def served_sglang(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Served:
    if "sglang-router" not in command_lines.installed_routers():
        pytest.skip("the sglang-router package is not installed (pip install sglang-router)")
    folder = tmp_path_factory.mktemp("served-sglang")
    home = made_ssh_home(folder)
    with booted(folder, home, private_network=True, binds={str(tiny_model): tiny_model}) as host:
        deployment = sglang_deployment(host, folder, tiny_model, router="sglang-router", second_decode=True)
        seen, operated = Seen(), None
        with pytest.MonkeyPatch.context() as patch, host.network():
            use_home(home, patch)
            done, rec = asyncio.run(_installed_and_up(deployment))
            if done.ok:
                read(seen, deployment, tiny_model)
            states = [active(host, unit) for unit in deployment_units(deployment)]
            for name in SERVERS:
                seen.lines[name] = host.run("journalctl", "-u", UNITS[name], "-o", "cat", "--no-pager").stdout.splitlines()
            if done.ok:
                operated = operate(host, deployment, tiny_model)
    return Served(host, deployment, done, rec, states, seen, operated)


async def _installed_and_up(deployment: Deployment) -> tuple[Done, Recorder]:
    await install(deployment)
    done, rec, _ = await bring_up(deployment)
    return done, rec
