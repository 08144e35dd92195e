"""Real vLLM on this machine's CPU (pdtui/sim/real_vllm.py), registered by tests/conftest.py.

``vllm_model`` makes the tiny Llama once per test process, its tokenizer trained
on pdtui's own source. ``vllm_host`` lends a test the module's container
(tests/systemd_host.py's ``Kept``: booted once, left as a boot leaves it before
and after each test) with a network of its own, since UCX listens on every
address, and the model bound in; a test reaches it from inside that network
(``with vllm_host.network():``). ``vllm_deployment`` writes a prefill, a decode and the
real vllm-router for it, each a unit made from its ``launch:`` block with the
CPU flags. Where vLLM or a container cannot run, the test skips, saying why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from pdtui.config import Deployment, parse_config
from pdtui.sim import real_sglang, real_vllm
from pdtui.sim.ports import free_port
from pdtui.sim.systemd_host import SystemdHost
from tests.systemd_host import Kept, kept

__all__ = ["VLLM_UNITS", "vllm_deployment", "vllm_host", "vllm_machine", "vllm_model"]

VLLM_UNITS = {"prefill": "v-prefill.service", "decode": "v-decode.service", "router": "v-router.service"}
# Two real servers start side by side in ~60 s on two idle cores; the suite's other workers share those cores.
TIMEOUT = "5m"


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = real_vllm.missing_reason()
    if reason:
        pytest.skip(f"no real vLLM: {reason}")
    return real_vllm.make_model(tmp_path_factory.mktemp("vllm-model"), real_sglang.corpus())


@pytest.fixture(scope="module")
def vllm_machine(tmp_path_factory: pytest.TempPathFactory, vllm_model: Path) -> Iterator[Kept]:
    with kept(tmp_path_factory.mktemp("vllm-machine"), "v-", private_network=True,
              binds={str(vllm_model): vllm_model}) as machine:
        yield machine


@pytest.fixture
def vllm_host(vllm_machine: Kept, monkeypatch: pytest.MonkeyPatch) -> Iterator[SystemdHost]:
    yield from vllm_machine.lent(monkeypatch)


def vllm_deployment(host: SystemdHost, folder: Path, model: Path, *, timeout: str = TIMEOUT,
                    prefill: Sequence[str] = (), decode: Sequence[str] = (),
                    env: Mapping[str, Mapping[str, str]] | None = None,
                    keys: Mapping[str, Mapping[str, object]] | None = None, **top: object) -> Deployment:
    """prefill, decode (real vLLM on the CPU) and the real vllm-router on the container at ``host``, each a unit
    from its ``launch:`` block; ``prefill``/``decode``: more flags for that server; ``env``: more of a server's
    environment, by role; ``keys``: more keys of a service, by name."""
    p, d, r = (free_port() for _ in range(3))

    def server(role: str, extra: Sequence[str]) -> dict:
        launch = real_vllm.launch(role, model)
        return {**launch, "args": [*launch["args"], *extra], "env": {**launch["env"], **(env or {}).get(role, {})}}

    config = {
        "name": "real-vllm", "engine": "vllm", **top,
        "hosts": {"cpu0": {"address": "127.0.0.1", "port": host.port, "user": "root"}},
        "services": {
            "prefill": {"host": "cpu0", "unit": "v-prefill", "role": "prefill", "port": p, "timeout": timeout,
                        "launch": server("prefill", prefill)},
            "decode": {"host": "cpu0", "unit": "v-decode", "role": "decode", "port": d, "timeout": timeout,
                       "launch": server("decode", decode)},
            "router": {"host": "cpu0", "unit": "v-router", "role": "router", "port": r, "timeout": timeout,
                       "launch": {"python": sys.executable, "host": "127.0.0.1", "prometheus_port": free_port()}},
        },
    }
    for name, more in (keys or {}).items():
        config["services"][name].update(more)
    path = folder / "pdtui.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return parse_config(path.read_text(), str(path))
