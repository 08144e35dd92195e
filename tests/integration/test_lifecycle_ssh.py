"""A deployment's life from the command line over real SSH on the sim: up, status, bare pdtui, restart, down.

Each test brings the reference shape (prefill GPUs 0-3, decode GPUs 4-7, the
real router) up behind sshd on 127.0.0.1 and runs one command as a user does,
``python -m pdtui ...`` in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pdtui.sim import command_lines
from pdtui.sim.ports import free_port
from pdtui.sim.sysfs import FabricShape, write_tree
from pdtui.sim.unit_store import UnitStore
from pdtui.ui.app import PdtuiApp
from tests.engine_helpers import worker_argv
from tests.sshd import trust

SERVICES = ("prefill", "decode", "router")


@pytest.fixture
def config(sandbox, sshd, ssh_home, tmp_path: Path) -> Path:
    """``pdtui.yaml`` in a folder of its own: the reference shape on one host reached through sshd."""
    trust(ssh_home, sshd)
    p, d, r, boot = (free_port() for _ in range(4))
    units = {
        "prefill": sandbox.add_unit("t-prefill", worker_argv("prefill", p, bootstrap=boot),
                                    env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),
        "decode": sandbox.add_unit("t-decode", worker_argv("decode", d, bootstrap=boot),
                                   env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"}),
        # systemd waits 90 s for a stop by default; the sim 3 s, and smg takes about 5 s to drain and exit
        "router": sandbox.add_unit("t-router", command_lines.router_argv(r, [(p, boot)], [d]), stop_timeout=20),
    }
    host = {"address": "127.0.0.1", "port": sshd.port, "sysfs": str(sandbox.sysfs),
            "commands": {tool: sandbox.commands[tool] for tool in ("systemctl", "journalctl", "nvidia-smi")}}
    services = {
        "prefill": {"role": "prefill", "port": p, "gpus": [0, 1, 2, 3], "bootstrap_port": boot},
        "decode": {"role": "decode", "port": d, "gpus": [4, 5, 6, 7]},
        "router": {"role": "router", "port": r},
    }
    doc = {"name": "life", "hosts": {"gpu0": host},
           "services": {name: {"host": "gpu0", "unit": units[name], "timeout": "40s", **fields}
                        for name, fields in services.items()}}
    folder = tmp_path / "deploy"
    folder.mkdir()
    path = folder / "pdtui.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def pdtui(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PDTUI_CONFIG"}
    return subprocess.run([sys.executable, "-m", "pdtui", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env)


def up(config: Path) -> None:
    result = pdtui("up", str(config), "--headless")
    assert result.returncode == 0, result.stdout + result.stderr


def invocations(sandbox, config: Path) -> dict[str, str]:
    store = UnitStore(sandbox.root)
    doc = yaml.safe_load(config.read_text())
    return {name: store.read_state(svc["unit"]).invocation for name, svc in doc["services"].items()}


def test_status_once_json_after_up_is_all_ready_and_commands_nothing(sandbox, config):
    up(config)
    before = invocations(sandbox, config)
    result = pdtui("status", str(config), "--once", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    status = json.loads(result.stdout)       # one JSON object, nothing else on stdout
    assert status["kind"] == "status" and status["ok"] is True and status["deployment"] == "life"
    by_name = {s["name"]: s for s in status["services"]}
    assert [by_name[s]["state"] for s in SERVICES] == ["ready"] * 3
    assert by_name["decode"]["active"] == "active" and by_name["decode"]["invocation"] == before["decode"]
    assert by_name["decode"]["gpus"] == [4, 5, 6, 7] and by_name["decode"]["uptime"] >= 0
    assert by_name["router"]["checks"]["smoke"]["ok"] is True
    assert invocations(sandbox, config) == before


def test_bare_pdtui_in_the_config_folder_watches_and_commands_nothing(sandbox, config):
    up(config)
    before = invocations(sandbox, config)
    result = pdtui("--headless", cwd=config.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "watching life" in out and "all ready" in out
    for service in SERVICES:
        assert f"{service:<8} READY" in out
    assert " starting " not in out and " stopping " not in out
    assert invocations(sandbox, config) == before


async def test_bare_pdtui_tui_shows_all_three_ready_over_ssh(sandbox, config, monkeypatch):
    """The TUI bare ``pdtui`` opens: the orchestrator it builds (status over SSH), drawn by the app."""
    from pdtui.cli import _parser
    from pdtui.commands.bring_up import host_factory_for
    from pdtui.config import load_config
    from pdtui.engine.intent import Intent, Verb
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.targets.registry import Registry
    up(config)
    before = invocations(sandbox, config)
    args = _parser().parse_args(["status", str(config)])
    orchestrator = Orchestrator(load_config(str(config)), Registry(host_factory_for(args)), intent=Intent(Verb.STATUS))
    app = PdtuiApp(orchestrator)
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(300):
            await pilot.pause(0.1)
            if app.deployment.done is not None:
                break
        assert app.deployment.done is not None and app.deployment.done.ok, app.deployment.done
        assert [app.deployment.panels[s].view.state.value for s in SERVICES] == ["ready"] * 3
        assert "watching" in app.deployment.title_bar.render().plain
        await orchestrator.close()
    assert invocations(sandbox, config) == before


def test_restart_decode_drains_it_over_ssh_and_the_router_serves_on(sandbox, config):
    up(config)
    before = invocations(sandbox, config)
    result = pdtui("restart", str(config), "decode", "--headless")
    assert result.returncode == 0, result.stdout + result.stderr
    after = invocations(sandbox, config)
    assert after["decode"] != before["decode"]
    assert after["prefill"] == before["prefill"] and after["router"] == before["router"]
    out = result.stdout
    assert "router   pending" not in out
    assert out.index("info: decode: taking it out of router") < out.index("decode   starting  systemctl restart") \
        < out.rindex("decode   READY") < out.index("info: decode: back in router"), out


def test_restart_decode_without_drain_restarts_decode_only_and_proves_the_router_again(sandbox, config):
    up(config)
    before = invocations(sandbox, config)
    result = pdtui("restart", str(config), "decode", "--headless", "--no-drain")
    assert result.returncode == 0, result.stdout + result.stderr
    after = invocations(sandbox, config)
    assert after["decode"] != before["decode"]
    assert after["prefill"] == before["prefill"] and after["router"] == before["router"]
    out = result.stdout
    started = [line for line in out.splitlines() if " starting " in line]
    assert len(started) == 1 and "decode   starting  systemctl restart t-decode.service" in started[0], out
    # As it ran, then decode restarted under the router, which waited for it and was proven again.
    waiting = out.index("router   pending   waiting for decode")
    assert out.index("router   READY") < waiting < out.rindex("decode   READY") < out.rindex("router   READY")
    assert "smoke: ok" in out


def test_down_stops_the_router_first_and_releases_the_gpus_then_status_exits_1(sandbox, config):
    up(config)
    result = pdtui("down", str(config), "--headless")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert out.index("router   STOPPED") < out.index("prefill  stopping") and "all stopped" in out
    assert out.count("gpus: ok: GPU memory released") == 2
    store = UnitStore(sandbox.root)
    doc = yaml.safe_load(config.read_text())
    assert {store.read_state(s["unit"]).active for s in doc["services"].values()} <= {"inactive", "failed"}
    status = pdtui("status", str(config), "--once")
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout.count("STOPPED") == 3 and "life: 0 of 3 ready" in status.stdout


def rewrite(sandbox, config: Path, service: str, *flags: str, unit: tuple[str, ...] = ()) -> None:
    """The installed unit of ``service`` given more flags (its port, bootstrap and GPUs as they were), and more
    lines in its [Service] section (``unit``)."""
    doc = yaml.safe_load(config.read_text())["services"]
    fields = doc[service]
    boot = doc["prefill"]["bootstrap_port"]
    gpus = ",".join(map(str, fields["gpus"]))
    sandbox.add_unit(fields["unit"].removesuffix(".service"), [*worker_argv(service, fields["port"], bootstrap=boot),
                                                               *flags], env={"CUDA_VISIBLE_DEVICES": gpus},
                     service=unit)


def refused_before_start(sandbox, config: Path, said: str) -> subprocess.CompletedProcess:
    """``check --probe`` and ``up`` both refuse, saying ``said``; nothing is started. ``up``'s result."""
    probe = pdtui("check", str(config), "--probe")
    assert probe.returncode == 1 and said in probe.stdout and "preflight failed" in probe.stdout, probe.stdout
    refused = pdtui("up", str(config), "--headless")
    assert refused.returncode == 1 and said in refused.stdout, refused.stdout
    assert not any(invocations(sandbox, config).values()), "nothing started"
    return refused


def with_fabric(config: Path, shape: FabricShape | None, tmp_path: Path) -> None:
    """The host's ``sysfs:`` pointed at a tree of ``shape`` (None: at a folder that is not there)."""
    doc = yaml.safe_load(config.read_text())
    root = tmp_path / "fabric"
    doc["hosts"]["gpu0"]["sysfs"] = str(write_tree(root, shape) if shape is not None else root)
    config.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.parametrize(("prefill", "decode", "said"), [
    (("--page-size", "64"), ("--page-size", "128"),
     "error: prefill and decode disagree on --page-size: prefill runs 64 (its unit t-prefill.service on gpu0), "
     "decode runs 128 (its unit t-decode.service on gpu0)"),
    (("--dist-init-addr", "127.0.0.1:41000"), ("--dist-init-addr", "127.0.0.1:41000"),
     "error: decode and prefill both take port 41000 on gpu0: decode's --dist-init-addr 127.0.0.1:41000 (its unit "
     "t-decode.service on gpu0) and prefill's --dist-init-addr 127.0.0.1:41000 (its unit t-prefill.service on gpu0)"),
])
def test_servers_that_cannot_work_together_are_refused_over_ssh_before_anything_starts(sandbox, config, prefill,
                                                                                        decode, said):
    rewrite(sandbox, config, "prefill", *prefill)
    rewrite(sandbox, config, "decode", *decode)
    refused_before_start(sandbox, config, said)
    forced = pdtui("up", str(config), "--headless", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert f"--force: starting despite this: {said.removeprefix('error: ')}" in forced.stdout


@pytest.mark.parametrize(("prefill", "decode", "said"), [
    (("--model-path", "a/A"), ("--model-path", "b/B"), "error: prefill and decode disagree on --model-path"),
    (("--disaggregation-transfer-backend", "nixl"), (),
     "error: prefill and decode disagree on --disaggregation-transfer-backend: prefill runs nixl"),
    (("--kv-cache-dtype", "fp8_e4m3"), ("--kv-cache-dtype", "bf16"), "error: prefill and decode disagree on "
                                                                     "--kv-cache-dtype"),
    ((), ("--attn-cp-size", "2"), "error: prefill and decode cannot pair: decode runs --attn-cp-size 2"),
    (("--pp-size", "2"), ("--pp-size", "4"), "error: prefill and decode cannot pair: decode runs --pp-size 4"),
    (("--tp", "8"), (), "error: prefill needs 8 GPUs on gpu0 (--tp 8) but CUDA_VISIBLE_DEVICES gives it 4"),
], ids=["model", "backend", "kv-dtype", "decode-cp", "pipeline", "tp-over-gpus"])
def test_each_refusal_of_servers_as_they_would_run_is_made_by_the_probe_and_by_up_over_ssh(sandbox, config, prefill,
                                                                                           decode, said):
    rewrite(sandbox, config, "prefill", *prefill)
    rewrite(sandbox, config, "decode", *decode)
    refused_before_start(sandbox, config, said)


def test_each_warning_of_servers_as_they_would_run_is_told_by_the_probe_and_by_up_which_starts_them(sandbox, config):
    rewrite(sandbox, config, "prefill", "--revision", "abc", "--disaggregation-transfer-backend", "mooncake_tcp",
            "--kv-cache-dtype", "fp8_e4m3", "--page-size", "64", "--disaggregation-ib-device", "mlx5_0")
    said = ["warning: prefill and decode may disagree on --revision: only prefill gives it",
            "warning: prefill and decode may disagree on --disaggregation-transfer-backend: prefill runs mooncake_tcp",
            "warning: prefill and decode may disagree on --kv-cache-dtype: prefill runs fp8_e4m3, decode auto",
            "warning: prefill and decode may disagree on --page-size: only prefill gives it",
            "warning: prefill and decode name their RDMA devices on one side only"]
    probe = pdtui("check", str(config), "--probe")
    assert probe.returncode == 0 and "preflight passed" in probe.stdout, probe.stdout
    assert [line for line in said if line not in probe.stdout] == [], probe.stdout
    result = pdtui("up", str(config), "--headless")
    assert result.returncode == 1 and [line for line in said if line not in result.stdout] == [], result.stdout
    # once up, their /server_info says how they resolved what was uncertain: the KV dtypes differ, which SGLang
    # refuses on the first request, so the router is not started; what stays uncertain is told again as warnings
    assert "error: prefill and decode run different KV cache dtypes: prefill fp8_e4m3, decode auto" in result.stdout
    assert "warning: prefill and decode run different revisions" in result.stdout
    assert "router   blocked   prefill and decode run different KV cache dtypes" in result.stdout


NAMED = {"prefill": ("--disaggregation-ib-device", "mlx5_0"), "decode": ("--disaggregation-ib-device", "mlx5_2")}


@pytest.mark.parametrize(("shape", "decode", "unit", "said"), [
    (FabricShape.failing("port-down"), NAMED["decode"], (),
     "error: decode: mlx5_2 on gpu0 has no active port (port 1: DOWN): no KV moves over it"),
    (FabricShape(), ("--disaggregation-ib-device", "mlx5_7"), (),
     "error: decode: --disaggregation-ib-device names mlx5_7, which gpu0 does not have (it has mlx5_0, mlx5_1, "
     "mlx5_2, mlx5_3)"),
    (FabricShape(), NAMED["decode"], ("User=nobody",),
     "error: decode: its unit runs as nobody and may lock 8 MiB of memory: Mooncake pins what it registers for RDMA"),
], ids=["port-down", "no-such-device", "memlock"])
def test_a_fabric_that_cannot_move_kv_is_refused_over_ssh_before_anything_starts(sandbox, config, tmp_path, shape,
                                                                                  decode, unit, said):
    with_fabric(config, shape, tmp_path)
    rewrite(sandbox, config, "prefill", *NAMED["prefill"])
    rewrite(sandbox, config, "decode", *decode, unit=unit)
    refused = refused_before_start(sandbox, config, said)
    assert "router   blocked   the preflight refused the servers as they would run" in refused.stdout
    assert not any(invocations(sandbox, config).values()), "nothing started"
    forced = pdtui("up", str(config), "--headless", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert f"--force: starting despite this: {said.removeprefix('error: ')}" in forced.stdout


def test_a_fabric_that_moves_kv_slowly_is_warned_of_over_ssh_and_the_bring_up_goes_on(sandbox, config, tmp_path):
    """Each NIC beside the other node's GPUs, nvidia_peermem not loaded: warnings, told by the probe and by up."""
    with_fabric(config, replace(FabricShape.failing("numa"), peermem=False), tmp_path)
    for service, flags in NAMED.items():
        rewrite(sandbox, config, service, *flags)
    said = ["warning: prefill: mlx5_0 is on NUMA node 1, its GPUs on node 0",
            "warning: decode: mlx5_2 is on NUMA node 0, its GPUs on node 1",
            "warning: decode: nvidia_peermem is not loaded on gpu0"]
    probe = pdtui("check", str(config), "--probe")
    assert probe.returncode == 0 and "preflight passed" in probe.stdout, probe.stdout
    assert all(line in probe.stdout for line in said), probe.stdout
    result = pdtui("up", str(config), "--headless")
    assert result.returncode == 0 and all(line in result.stdout for line in said), result.stdout


@pytest.mark.parametrize(("shape", "said"), [
    (FabricShape(devices={}), "warning: decode: gpu0 has no RDMA device (nothing under"),
    (None, "info: fabric not checked on gpu0: its sysfs"),
], ids=["no-rdma-device", "no-sysfs"])
def test_servers_that_name_no_device_on_a_host_without_rdma_pass_the_probe_saying_so(sandbox, config, tmp_path, shape,
                                                                                    said):
    with_fabric(config, shape, tmp_path)
    probe = pdtui("check", str(config), "--probe")
    assert probe.returncode == 0 and "preflight passed" in probe.stdout and said in probe.stdout, probe.stdout


def test_servers_that_run_alike_pass_the_probe_over_ssh_with_nothing_to_say(sandbox, config):
    rewrite(sandbox, config, "prefill", "--page-size", "64", "--dist-init-addr", "127.0.0.1:41000")
    rewrite(sandbox, config, "decode", "--page-size", "64", "--dist-init-addr", "127.0.0.1:41010")
    probe = pdtui("check", str(config), "--probe")
    assert probe.returncode == 0 and "preflight passed" in probe.stdout, probe.stdout
    assert "error:" not in probe.stdout and "warning:" not in probe.stdout
