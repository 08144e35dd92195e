"""Real SGLang on this machine's CPU (pdtui/sim/real_sglang.py), registered by tests/conftest.py.

``tiny_model`` makes the tiny GPT-2 once per test process, its tokenizer trained on
pdtui's own source. ``sglang_host`` boots a container (tests/systemd_host.py)
with a network of its own, since real SGLang's torch store and Mooncake bind
every address, and the model bound in; a test reaches it from inside that
network (``with sglang_host.network():``). ``sglang_deployment`` writes a
prefill, a decode and a real router for it, each a unit made from its
``launch:`` block with the CPU flags. Where SGLang or a container cannot run,
the test skips, saying why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from pdtui.config import Deployment, parse_config
from pdtui.sim import real_sglang
from pdtui.sim.ports import free_port
from pdtui.sim.sandbox import Sandbox
from pdtui.sim.systemd_host import SystemdHost
from tests.sshd import SshHome
from tests.systemd_host import booted

__all__ = ["ONE_ENGINE_AT_A_TIME", "UNITS", "before_start_deployment", "sglang_deployment", "sglang_host", "tiny_model"]

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


@pytest.fixture
def sglang_host(tmp_path: Path, ssh_home: SshHome, tiny_model: Path) -> Iterator[SystemdHost]:
    with booted(tmp_path, ssh_home, private_network=True, binds={str(tiny_model): tiny_model}) as host:
        yield host


def sglang_deployment(host: SystemdHost, folder: Path, model: Path, *, router: str = "smg", timeout: str = TIMEOUT,
                      prefill: Sequence[str] = (), decode: Sequence[str] = (),
                      transfer_backend: Mapping[str, str] | None = None, second_decode: bool = False,
                      keys: Mapping[str, Mapping[str, object]] | None = None, **top: object) -> Deployment:
    """prefill, decode (real SGLang on the CPU) and ``router`` (a real router's package) on the container at
    ``host``, each a unit from its ``launch:`` block; ``prefill``/``decode``: more flags for that server;
    ``transfer_backend``: another, by role; ``second_decode``: a decode-1 beside decode; ``keys``: more keys of
    a service, by name."""
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
