"""pdtui against a real systemd 252 and journald, over real SSH: the behaviours the stand-in tests cover.

Each test boots a fresh container (tests/systemd_host.py), installs the reference
shape there with ``pdtui units --install`` (the sim's workers and a router as real
units) and runs pdtui as a user does: the engine in-process, or ``python -m pdtui``.
What the host did is read from the container's own systemd and journal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pdtui.commands import units_command as units
from pdtui.config import Deployment, parse_config
from pdtui.engine.events import Notice
from pdtui.hosts import make_host
from pdtui.sim.ports import free_port
from pdtui.sim.systemd_host import SystemdHost
from tests.conftest_sim import pdtui_until
from tests.engine_helpers import bring_up, until_it_fails
from tests.systemd_host import install, missing_env_file_lines, real_deployment

UNITS = {"prefill": "t-prefill.service", "decode": "t-decode.service", "router": "t-router.service"}
STEPS = ["preflight", "start backends", "wait for readiness", "start router", "probe router"]
WAIT = 90


def show(host: SystemdHost, unit: str, *properties: str) -> dict[str, str]:
    out = host.run("systemctl", "show", "-p", ",".join(properties), unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def invocations(host: SystemdHost) -> dict[str, str]:
    return {name: show(host, unit, "InvocationID")["InvocationID"] for name, unit in UNITS.items()}


def journal(host: SystemdHost, unit: str) -> str:
    return host.run("journalctl", "-u", unit, "--no-pager", "-o", "cat").stdout


def pdtui(*args: str, timeout: float = WAIT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PDTUI_CONFIG"}
    return subprocess.run([sys.executable, "-m", "pdtui", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


@pytest.fixture
async def installed(systemd_host: SystemdHost, tmp_path: Path) -> Deployment:
    """The reference shape with the sim's router, installed on the container."""
    deployment = real_deployment(systemd_host, tmp_path)
    await install(deployment)
    return deployment


# -- up ---------------------------------------------------------------------------------------------------------


async def test_up_with_each_real_router_starts_the_router_after_both_backends_then_enables_it(
        systemd_host, tmp_path, real_router):
    deployment = real_deployment(systemd_host, tmp_path, router=real_router)
    await install(deployment)
    done, rec, _ = await bring_up(deployment)
    assert done.ok, done
    assert [show(systemd_host, u, "ActiveState")["ActiveState"] for u in UNITS.values()] == ["active"] * 3
    starting = rec.index("router", "starting")
    assert rec.index("prefill", "ready") < starting and rec.index("decode", "ready") < starting
    assert rec.change("router", "starting").reason == "systemctl start t-router.service"
    # Enabled once started (off the router's critical path); the backends are started, never enabled.
    assert systemd_host.run("systemctl", "is-enabled", "t-router.service").stdout.strip() == "enabled"
    assert systemd_host.run("systemctl", "is-enabled", "t-decode.service").stdout.strip() == "disabled"
    assert [n for n in rec.of(Notice) if n.service == "router"] == []      # an enable that worked is not news
    smoke = [e for e in rec.events if getattr(e, "check", None) == "smoke"]
    assert smoke[-1].ok, smoke


@pytest.mark.parametrize(("mode", "said"), [
    ("oom", "CUDA out of memory"),
    ("warmup-failed", "warm"),
    ("nccl", "NCCL"),
])
async def test_a_failing_decode_fails_and_the_router_is_never_started(systemd_host, tmp_path, mode, said):
    deployment = real_deployment(systemd_host, tmp_path, decode=["--fail", mode])
    await install(deployment)
    done, rec, _ = await bring_up(deployment)
    assert done.exit_code == 1
    assert rec.states("decode")[-1] == "failed" and said.lower() in done.failures["decode"].lower(), done
    assert rec.states("router") == ["blocked"]
    assert show(systemd_host, UNITS["router"], "ActiveState", "InvocationID") == {"ActiveState": "inactive",
                                                                                "InvocationID": ""}


async def test_a_hung_decode_times_out_and_the_router_is_never_started(systemd_host, tmp_path):
    deployment = real_deployment(systemd_host, tmp_path, decode=["--fail", "hang"], timeout="4s")
    await install(deployment)
    done, rec, _ = await bring_up(deployment)
    assert done.exit_code == 1 and rec.states("decode")[-1] == "timed_out", done
    assert "not ready after 4s" in done.failures["decode"]
    assert show(systemd_host, UNITS["router"], "InvocationID") == {"InvocationID": ""}


async def test_a_ready_line_of_an_earlier_invocation_never_counts(systemd_host, tmp_path):
    healthy = real_deployment(systemd_host, tmp_path)
    await install(healthy)
    assert systemd_host.run("systemctl", "start", UNITS["decode"]).returncode == 0
    _until(lambda: "fired up and ready" in journal(systemd_host, UNITS["decode"]))
    assert systemd_host.run("systemctl", "stop", UNITS["decode"]).returncode == 0
    hanging = real_deployment(systemd_host, tmp_path, decode=["--fail", "hang"], timeout="4s")
    await install(hanging, yes=True)
    done, rec, _ = await bring_up(hanging)
    assert rec.states("decode")[-1] == "timed_out", done
    assert journal(systemd_host, UNITS["decode"]).count("fired up and ready") == 1    # the earlier run's, still there


async def test_a_failing_enable_is_told_on_its_own_and_the_router_still_serves(systemd_host, tmp_path):
    deployment = real_deployment(systemd_host, tmp_path)
    await install(deployment)
    # An alias of another unit type: systemd starts the unit but refuses to enable it.
    path = "/etc/systemd/system/t-router.service"
    systemd_host.run("sh", "-c", f"echo Alias=t-router.socket >> {path} && systemctl daemon-reload")
    done, rec, _ = await bring_up(deployment, smoke=False)
    assert done.ok, done
    [told] = [n for n in rec.of(Notice) if n.service == "router"]
    assert (told.level, told.text) == ("warning", "could not enable t-router.service (it runs, but will not start at "
                                                  "boot): Failed to enable unit: Cannot alias t-router.service as "
                                                  "t-router.socket.")


async def test_a_decode_that_cannot_reach_the_prefill_is_named_by_its_pair_and_status_shows_the_matrix(
        systemd_host, tmp_path, real_router):
    deployment = real_deployment(systemd_host, tmp_path, router=real_router,
                                 second_decode=["--unreachable-bootstrap", "{bootstrap}"])
    await install(deployment)
    done, rec, _ = await bring_up(deployment)
    assert done.exit_code == 1, done
    boot = deployment.services["prefill"].bootstrap_port
    assert done.failures == {"router": "pairs: decode-1 ✗ prefill: KV transfer failed: decode-1: KVTransferError: "
                                       f"Could not fetch prefill parallel info from bootstrap_addr: 127.0.0.1:{boot}"}
    assert [rec.states(name)[-1] for name in ("prefill", "decode", "decode-1")] == ["ready"] * 3
    status = pdtui("status", deployment.source, "--once", "--json", "--pairs")
    assert status.returncode == 1, status.stdout + status.stderr
    router = next(s for s in json.loads(status.stdout)["services"] if s["name"] == "router")
    assert [(p["prefill"], p["decode"], p["ok"]) for p in router["pairs"]] == [("prefill", "decode", True),
                                                                              ("prefill", "decode-1", False)]


# -- status, restart, down, as a user runs them -------------------------------------------------------------------


async def test_status_restart_decode_and_down_on_the_real_manager(systemd_host, tmp_path, real_router):
    deployment = real_deployment(systemd_host, tmp_path, router=real_router)
    await install(deployment)
    config = deployment.source
    assert pdtui("up", config, "--headless").returncode == 0
    before = invocations(systemd_host)

    status = pdtui("status", config, "--once", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    by_name = {s["name"]: s for s in json.loads(status.stdout)["services"]}
    assert {name: s["state"] for name, s in by_name.items()} == dict.fromkeys(UNITS, "ready")
    assert {name: s["invocation"] for name, s in by_name.items()} == before
    assert by_name["decode"]["active"] == "active" and by_name["decode"]["sub"] == "running"

    restart = pdtui("restart", config, "decode", "--headless")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    after = invocations(systemd_host)
    assert after["decode"] != before["decode"] and after["prefill"] == before["prefill"]
    assert after["router"] == before["router"]
    out = restart.stdout
    assert "router   pending" not in out, "drained: the router serves on"
    assert out.index("info: decode: taking it out of router") < out.index("info: decode: back in router"), out

    down = pdtui("down", config, "--headless")
    assert down.returncode == 0, down.stdout + down.stderr
    assert down.stdout.index("router   STOPPED") < down.stdout.index("prefill  stopping")
    assert [show(systemd_host, u, "ActiveState")["ActiveState"] for u in UNITS.values()] == ["inactive"] * 3
    stopped = pdtui("status", config, "--once")
    assert stopped.returncode == 1 and stopped.stdout.count("STOPPED") == 3, stopped.stdout


async def test_a_unit_that_restarts_itself_is_seen_failing_through_its_restart_loop(systemd_host, installed):
    """``Restart=on-failure``: a killed decode is ``activating``/``auto-restart`` until systemd starts it again
    (RestartSec=10): no process runs, so it is failed, not attached to."""
    done, rec, orchestrator = await bring_up(installed)
    assert done.ok, done
    # Its restart held off for minutes (a drop-in): the look below, on a loaded machine, comes while no process runs.
    dropin = f"/etc/systemd/system/{UNITS['decode']}.d"
    systemd_host.run("sh", "-c", f"mkdir -p {dropin} && printf '[Service]\\nRestartSec=300\\n' > {dropin}/slow.conf "
                                 "&& systemctl daemon-reload")
    assert show(systemd_host, UNITS["decode"], "RestartUSec")["RestartUSec"] == "5min"
    pid = show(systemd_host, UNITS["decode"], "MainPID")["MainPID"]
    systemd_host.run("kill", "-9", pid)
    _until(lambda: show(systemd_host, UNITS["decode"], "SubState")["SubState"] == "auto-restart")
    status = pdtui("status", installed.source, "--once", "--json", "--no-smoke")
    decode = next(s for s in json.loads(status.stdout)["services"] if s["name"] == "decode")
    assert status.returncode == 1 and decode["state"] == "failed", decode
    assert decode["reason"] == ("unit t-decode.service ended (killed by signal 9/KILL); systemd restarts it "
                                "(auto-restart, NRestarts=0)"), decode


async def test_a_unit_whose_program_is_not_there_fails_naming_203_exec_and_quoting_systemd(systemd_host, tmp_path):
    """The commonest mistake of a unit: a wrong venv path. systemd's own exit status says it, and its executor's
    line says which path."""
    deployment = real_deployment(systemd_host, tmp_path)
    config = yaml.safe_load(Path(deployment.source).read_text())
    config["services"]["decode"]["launch"]["command"] = ["/nowhere/venv/bin/python", "-m", "pdtui.sim.worker"]
    Path(deployment.source).write_text(yaml.safe_dump(config, sort_keys=False))
    wrong = parse_config(Path(deployment.source).read_text(), deployment.source)
    await install(wrong)
    done, rec, _ = await bring_up(wrong)
    assert rec.states("decode")[-1] == "failed" and rec.states("router") == ["blocked"], done
    reason = done.failures["decode"]       # its unit restarts on failure: systemd will try it again, in vain
    assert reason.startswith("unit t-decode.service ended (exit status 203/EXEC: systemd could not run its ExecStart: "
                             "a wrong path, often a venv's python); systemd restarts it"), reason
    assert reason.endswith(": Failed to locate executable /nowhere/venv/bin/python: No such file or directory"), reason


async def test_a_unit_left_failed_at_its_start_limit_is_cleared_then_started(systemd_host, installed):
    """A unit started too often is refused by systemd's start limit, pdtui's start too, until reset-failed."""
    for _ in range(3):      # StartLimitBurst=3 in StartLimitIntervalSec=: the fourth restart is refused
        systemd_host.run("systemctl", "restart", UNITS["decode"])
    refused = systemd_host.run("systemctl", "restart", UNITS["decode"])
    assert refused.returncode != 0 and "Start request repeated too quickly" in journal(systemd_host, UNITS["decode"])
    assert show(systemd_host, UNITS["decode"], "ActiveState", "Result") == {"ActiveState": "failed",
                                                                          "Result": "start-limit-hit"}
    done, rec, _ = await bring_up(installed)
    assert done.ok, done
    cleared = [n.text for n in rec.of(Notice) if n.service == "decode"]
    assert cleared == ["t-decode.service was left failed (started too often: systemd's start limit, StartLimitBurst= "
                       "in StartLimitIntervalSec=, refuses further starts until reset-failed): cleared before its start "
                       "(systemctl reset-failed, which lifts its start limit too)"], cleared


# -- units and drift ---------------------------------------------------------------------------------------------


async def test_units_install_then_diff_then_a_hand_edit_is_refused_without_yes(systemd_host, tmp_path, capsys):
    deployment = real_deployment(systemd_host, tmp_path)
    assert await units.diff(deployment, make_host) == 1
    assert "(not installed)" in capsys.readouterr().out
    await install(deployment)
    assert "daemon-reload" in capsys.readouterr().out
    assert await units.diff(deployment, make_host) == 0
    path = "/etc/systemd/system/t-decode.service"
    systemd_host.run("sed", "-i", "s/--tp 1/--tp 2/", path)
    assert await units.diff(deployment, make_host) == 1
    diff = capsys.readouterr().out
    assert re.search(r"^-ExecStart=.* --tp 2 ", diff, re.M) and re.search(r"^\+ExecStart=.* --tp 1 ", diff, re.M), diff
    assert await units.install(deployment, make_host, yes=False) == 1
    assert "--tp 2" in systemd_host.run("cat", path).stdout
    assert await units.install(deployment, make_host, yes=True) == 0
    assert "--tp 2" not in systemd_host.run("cat", path).stdout
    backups = systemd_host.run("sh", "-c", "ls /etc/systemd/system/ | grep t-decode.service.pdtui-backup").stdout
    assert len(backups.split()) == 1


@pytest.mark.parametrize("where", ["unit file", "drop-in"])
async def test_a_drifted_unit_is_refused_before_anything_starts(systemd_host, installed, where):
    decode = installed.services["decode"]
    unit = "/etc/systemd/system/t-decode.service"
    exec_start = next(line for line in systemd_host.run("cat", unit).stdout.splitlines()
                      if line.startswith("ExecStart="))
    drifted = exec_start.replace(f"--port {decode.port}", "--port 1")
    if where == "unit file":
        systemd_host.run("sed", "-i", f"s/--port {decode.port}/--port 1/", unit)
    else:    # systemd's own override: the drop-in resets ExecStart= and sets its own
        systemd_host.run("sh", "-c", f"mkdir -p {unit}.d && printf '[Service]\\nExecStart=\\n%s\\n' '{drifted}' "
                                     f"> {unit}.d/port.conf")
    systemd_host.run("systemctl", "daemon-reload")
    done, rec, _ = await bring_up(installed)
    assert done.exit_code == 1
    assert done.failures["decode"].startswith(f"its unit listens on port 1 (--port), the config says {decode.port}")
    assert invocations(systemd_host) == dict.fromkeys(UNITS, "")


# -- Ctrl-C --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", STEPS)
async def test_ctrl_c_during_each_step_exits_130_and_leaves_nothing_of_pdtui_on_the_host(
        systemd_host, tmp_path, step):
    deployment = real_deployment(systemd_host, tmp_path, startup=2.0)
    await install(deployment)
    code, out, err = pdtui_until(["up", deployment.source, "--headless"], f"▶ {step}", wait=WAIT)
    assert code == 130, out + err
    assert "Traceback" not in err
    summary = next(line for line in err.splitlines() if line.startswith("pdtui: interrupted"))
    assert "commanded" in summary
    # The tail and every command ended with the connection: no journalctl or systemctl of pdtui's runs on.
    _until(lambda: not systemd_host.run("pgrep", "-x", "journalctl").stdout.strip())
    started = [name for name, unit in UNITS.items() if show(systemd_host, unit, "InvocationID")["InvocationID"]]
    for name in started:   # what was started is left running, and said so
        assert UNITS[name] in summary, (name, summary)


def _until(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout}s: {check}")
        time.sleep(0.05)



# -- a server over several nodes -------------------------------------------------------------------------------


async def test_a_two_node_decode_on_real_units_is_ready_and_a_killed_rank_stops_its_server(systemd_host, tmp_path):
    """Rank 1 on a second host entry of the same container (a unit and a port of its own): real units with
    Restart=no, ready as one; rank 1 killed fails the server, and rank 0's real unit is stopped."""
    config = yaml.safe_load(Path(real_deployment(systemd_host, tmp_path).source).read_text())
    config["hosts"]["gpu1"] = dict(config["hosts"]["gpu0"])
    decode = config["services"]["decode"]
    decode["hosts"] = [decode.pop("host"), {"host": "gpu1", "port": free_port(), "unit": "t-decode-r1"}]
    decode["launch"] |= {"tp": 2, "dist_port": free_port()}
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    wide = parse_config(path.read_text(), str(path))
    await install(wide)
    assert "Restart=no" in systemd_host.run("systemctl", "cat", "t-decode-r1.service").stdout
    done, rec, _ = await bring_up(wide)
    assert done.ok, done
    assert rec.index("decode@1", "ready") < rec.index("router", "starting")

    def kill_rank_1(_done) -> None:
        systemd_host.run("kill", "-9", show(systemd_host, "t-decode-r1.service", "MainPID")["MainPID"])

    watched = await until_it_fails(wide, "decode@1", meanwhile=kill_rank_1, timeout=60)
    told = [n.text for n in watched.of(Notice) if n.level == "error" and n.service == "decode"]
    assert any(text.startswith("decode: rank 1 on gpu1 ") for text in told), told
    _until(lambda: show(systemd_host, UNITS["decode"], "ActiveState")["ActiveState"] != "active")


async def test_real_systemd_reads_hostile_values_exactly_and_secrets_from_the_0600_environment_file(
        systemd_host, tmp_path):
    """Environment= values with $, %, quotes, backslashes, blanks, ;, $(id) and unicode come back from systemd's
    own parse exactly, one each; the secret is not among them but in the started server's environment."""
    hostile = {"DOLLAR": "a$HOME$(id)`id`", "PERCENT": "50%h%%", "QUOTES": "it's \"q\"", "BACKSLASH": "a\\b\\\\c",
               "SPACES": " lead  trail ", "SEMI": "a;b && c", "UNICODE": "Grüße ✓"}
    deployment = real_deployment(systemd_host, tmp_path)
    decode = deployment.services["decode"]
    assert decode.launch is not None
    launch = decode.launch.model_copy(update={"env": {**decode.launch.env, **hostile, "HF_TOKEN": "hf_real$ecret`x\""}})
    deployment.services["decode"] = decode.model_copy(update={"launch": launch})
    await install(deployment)
    environment = show(systemd_host, UNITS["decode"], "Environment")["Environment"]
    assert "hf_real" not in environment
    mode = systemd_host.run("stat", "-c", "%a", f"/etc/pdtui/env/{UNITS['decode']}.env").stdout.strip()
    assert mode == "600" and systemd_host.run("stat", "-c", "%a", "/etc/pdtui/env").stdout.strip() == "700"
    assert systemd_host.run("systemctl", "start", UNITS["decode"]).returncode == 0
    pid = show(systemd_host, UNITS["decode"], "MainPID")["MainPID"]
    environ = dict(item.split("=", 1) for item in
                   systemd_host.run("cat", f"/proc/{pid}/environ").stdout.split("\0") if "=" in item)
    assert {key: environ.get(key) for key in hostile} == hostile
    assert environ["HF_TOKEN"] == "hf_real$ecret`x\""


async def test_a_missing_environment_file_fails_the_start_job_with_result_resources(systemd_host, tmp_path):
    """The real manager's side of the sim's test (tests/integration/test_units_install.py): same lines, same exit."""
    deployment = real_deployment(systemd_host, tmp_path)
    decode = deployment.services["decode"]
    assert decode.launch is not None
    launch = decode.launch.model_copy(update={"env": {**decode.launch.env, "HF_TOKEN": "hf_x1234"}})
    deployment.services["decode"] = decode.model_copy(update={"launch": launch})
    await install(deployment)
    systemd_host.run("rm", f"/etc/pdtui/env/{UNITS['decode']}.env")
    started = systemd_host.run("systemctl", "start", UNITS["decode"])
    assert started.returncode == 1 and started.stderr.startswith(
        f"Job for {UNITS['decode']} failed because of unavailable resources or another system error.\n")
    assert show(systemd_host, UNITS["decode"], "Result", "MainPID") == {"Result": "resources", "MainPID": "0"}
    assert journal(systemd_host, UNITS["decode"]).splitlines()[-4:] == missing_env_file_lines(
        UNITS["decode"], "real decode: SGLang decode server")
