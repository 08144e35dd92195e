"""The command line as a user runs it: exit codes, headless lines, the JSON contract."""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdtui.sim.command_lines import REAL_ROUTERS, SIM_ROUTER, router_label
from pdtui.sim.procs import running_with
from pdtui.sim.sandbox import Sandbox
from pdtui.support.data import data_dir
from tests.engine_helpers import real_router_params

STATES = {"pending", "starting", "waiting", "ready", "failed", "timed_out", "blocked"}


def pdtui(*args: str, timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdtui", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_demo_headless_brings_everything_up():
    result = pdtui("demo", "--headless", "--startup", "0.5")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "all ready" in out
    assert out.index("router   starting") > out.index("prefill  READY")
    assert out.index("router   starting") > out.index("decode   READY")
    assert "port 30001 accepting" not in out, "a test's demo takes ports the OS picks (PDTUI_DEMO_PORTS=any)"


def test_demo_json_contract():
    result = pdtui("demo", "--json", "--startup", "0.5")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert all("kind" in e and "elapsed" in e for e in events)
    states = [e for e in events if e["kind"] == "state"]
    assert states and all(e["state"] in STATES and e["service"] for e in states)
    assert events[-1]["kind"] == "done" and events[-1]["ok"] is True and events[-1]["exit_code"] == 0


def test_demo_oom_exits_1_naming_decode_and_the_oom_line():
    result = pdtui("demo", "--headless", "--startup", "0.5", "--fail", "decode:oom")
    assert result.returncode == 1
    out = result.stdout
    assert "decode   FAILED    CUDA out of memory" in out
    assert "> " in out and "OutOfMemoryError" in out or "CUDA out of memory. Tried" in out
    assert "router   blocked" in out
    assert "router   starting" not in out


def test_demo_whose_router_answers_200_without_tokens_exits_1_quoting_the_answer():
    result = pdtui("demo", "--headless", "--startup", "0.5", "--no-load", "--fail", "decode:empty-200")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "router: smoke: HTTP 200, finish_reason 'abort' after 0 tokens: {\"choice\":" in result.stdout
    assert "all ready" not in result.stdout


def test_demo_whose_decode_answers_in_reasoning_content_only_is_ready():
    result = pdtui("demo", "--headless", "--startup", "0.5", "--no-load", "--generation", "older",
                   "--fail", "decode:reasoning-only")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "in reasoning_content)" in result.stdout and "all ready" in result.stdout


@pytest.mark.parametrize("router", [*real_router_params(), "sim"])
def test_demo_runs_the_router_asked_for_and_says_which_once(tmp_path, router):
    result = pdtui("demo", "--headless", "--startup", "0.5", "--router", router, "--sandbox", str(tmp_path / "sb"))
    assert result.returncode == 0, result.stdout + result.stderr
    told = [line for line in result.stderr.splitlines() if "the router is" in line]
    assert told == [f"pdtui demo: the router is {router_label(router)}"]
    module = "pdtui.sim.router" if router == SIM_ROUTER else f"{REAL_ROUTERS[router]}.launch_router"
    assert f" -m {module} --pd-disaggregation" in (tmp_path / "sb/units/sglang-dsv4-router.service").read_text()


def test_demo_asked_for_a_router_that_is_not_installed_says_so_in_one_line():
    hidden = "import sys; sys.modules['smg'] = None; from pdtui.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", hidden, "demo", "--router", "smg"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("pdtui: --router smg: the smg package is not installed here (pip install smg)")


def test_bad_fail_option_is_a_usage_error():
    result = pdtui("demo", "--headless", "--fail", "decode:meltdown")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--fail expects SERVICE:MODE" in result.stderr


def test_demo_real_refuses_the_simulated_demos_options_in_one_line():
    result = pdtui("demo", "--real", "--headless", "--fail", "decode:oom", "--startup", "2")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("pdtui: demo --real runs real SGLang in the terminal or headless: --fail, --startup "
                             "belong to the simulated demo\n")


def test_demo_real_without_real_sglang_says_how_to_install_it(tmp_path):
    result = pdtui("demo", "--real", "--headless", env={**os.environ, "PDTUI_ENGINES": str(tmp_path)})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"pdtui: demo --real: real SGLang 0.5.23 is not installed in {tmp_path}/sglang-0.5.23 "
                             "(run: python -m pdtui.sim.real_sglang install)\n")


def test_config_error_is_one_line_with_position(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\nhosts:\n  gpu0:\n    adress: 10.0.0.1\nservices: {}\n")
    for command in ("check", "up"):
        result = pdtui(command, str(config))
        assert result.returncode == 2
        assert result.stderr.startswith(f"{config}:4:5: ")
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_check_prints_the_plan_of_the_reference_deployment():
    from pdtui.support.data import data_dir
    reference = data_dir("sample_configs") / "reference.yaml"
    result = pdtui("check", str(reference))
    assert result.returncode == 0, result.stderr
    for word in ("sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router", "30001"):
        assert word in result.stdout


TYPO_IN_ADDRESS = """\
name: typo
hosts:
  gpu0: {address: nohost.invalid}
services:
  prefill: {host: gpu0, role: prefill, unit: sglang-prefill.service, port: 30000, timeout: 60s}
  decode: {host: gpu0, role: decode, unit: sglang-decode.service, port: 30001, timeout: 60s}
  router: {host: gpu0, role: router, unit: sglang-router.service, port: 8000, after: [prefill, decode], timeout: 60s}
"""


def test_a_host_name_that_does_not_resolve_exits_1_saying_so_once(tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text(TYPO_IN_ADDRESS)
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("SSH_AUTH_SOCK", None)
    reason = "gpu0: cannot resolve host name 'nohost.invalid' (check address: in the config)"
    for command in ("up", "--headless"), ("check", "--probe"):
        result = pdtui(*command, str(config), env=env)
        assert result.returncode == 1, result.stdout + result.stderr
        about_host = [line.split("] ", 1)[1] for line in result.stdout.splitlines()
                      if "] host gpu0: " in line or "] warning: " in line]
        closed = ["host gpu0: closed"] if command[0] == "check" else []   # up: the summary is the last line
        assert about_host == ["host gpu0: connecting: nohost.invalid", f"host gpu0: error: {reason}", *closed]
        assert result.stdout.count(f"FAILED    {reason}\n") == 3


def test_interrupt_exits_130_and_leaves_no_process():
    """The demo in the temporary sandbox it makes itself: Ctrl-C while it waits exits 130, nothing runs on."""
    proc = subprocess.Popen([sys.executable, "-m", "pdtui", "demo", "--headless", "--startup", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    err, left = "", ["the demo was never interrupted"]
    try:
        deadline = time.monotonic() + 30
        seen = ""
        while "waiting" not in seen and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        left = [str(found) for found in running_with(str(_demo_root(err)).encode())]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        root = _demo_root(err)
        if root is not None and root.exists():
            Sandbox(root).cleanup()        # what a failed run left
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert left == [], f"still running on the demo's sandbox: {left}"


def _demo_root(err: str) -> Path | None:
    """The temporary sandbox a demo made, as its load line names it."""
    found = re.search(r"its log: (\S+)/load\.log", err)
    return Path(found[1]) if found else None


def test_unknown_theme_is_refused_before_anything_starts():
    result = pdtui("demo", "--theme", "nope")
    assert result.returncode == 2
    assert result.stderr == "pdtui: unknown theme 'nope'; available: dark, light\n"


def test_a_broken_theme_file_is_one_line_before_anything_starts(tmp_path, monkeypatch, capsys):
    from pdtui.cli import main
    from pdtui.ui import themes
    (tmp_path / "neon.yaml").write_text("primary: #0178d4\n", encoding="utf-8")
    monkeypatch.setattr(themes, "_theme_dir", lambda: tmp_path)
    assert main(["demo", "--theme", "neon", "--sandbox", str(tmp_path / "never")]) == 2
    assert capsys.readouterr().err == (f"{tmp_path / 'neon.yaml'}:1:9: expected a colour such as \"#0178d4\" for 'primary', "
                                       "got nothing (quote it: an unquoted # starts a YAML comment)\n")
    assert not (tmp_path / "never").exists()


def test_units_prints_the_reference_units_and_yes_needs_install():
    from pdtui.support.data import data_dir
    reference = str(data_dir("sample_configs") / "reference.yaml")
    result = pdtui("units", reference)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("# Generated by pdtui from ") == 3 and "--pd-disaggregation" in result.stdout
    refused = pdtui("units", reference, "--yes")
    assert refused.returncode == 2 and refused.stderr == "pdtui: --yes goes with --install\n"


def test_bare_pdtui_with_no_config_anywhere_says_where_it_looked_and_offers_demo_and_init(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PDTUI_CONFIG", "XDG_CONFIG_HOME")}
    env["HOME"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-m", "pdtui"], capture_output=True, text=True, timeout=60,
                            cwd=tmp_path, env=env)
    assert result.returncode == 2 and result.stdout == ""
    assert str(tmp_path / "pdtui.yaml") in result.stderr and str(tmp_path / ".config" / "pdtui") in result.stderr
    assert "pdtui demo" in result.stderr and "pdtui init" in result.stderr and "Traceback" not in result.stderr


def test_restart_of_a_service_the_config_does_not_have_is_one_line(tmp_path):
    result = pdtui("restart", "sample_configs/reference.yaml", "decoder")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no service 'decoder'" in result.stderr


def test_a_bad_drain_timeout_is_one_line():
    result = pdtui("restart", "sample_configs/reference.yaml", "decode", "--drain-timeout", "soon")
    assert result.returncode == 2 and result.stderr.startswith("pdtui: --drain-timeout: "), result.stderr
    assert result.stderr.strip().count("\n") == 0


@pytest.mark.parametrize("words", [
    ["restart", "sample_configs/reference.yaml", "--rolling", "decoder"],
    ["restart", "--rolling", "decoder", "sample_configs/reference.yaml"],
    ["restart", "decoder", "--rolling", "sample_configs/reference.yaml"],
])
def test_options_go_before_between_or_after_the_config_and_services(words):
    """Each order reads the same: the config found, the unknown service named (argparse once refused the first with
    ``unrecognized arguments``)."""
    result = pdtui(*words)
    assert result.returncode == 2 and result.stderr.startswith("pdtui: restart: no service 'decoder' in "), result.stderr


def test_the_intermixed_command_line_reads_every_option_and_positional():
    from pdtui.cli import _parser
    args = _parser().parse_args(["restart", "deploy.yaml", "--rolling", "decodes", "--no-drain"])
    assert (args.targets, args.rolling, args.no_drain) == (["deploy.yaml", "decodes"], True, True)
    args = _parser().parse_args(["down", "--timeout", "30s", "deploy.yaml", "router"])
    assert (args.targets, args.timeout) == (["deploy.yaml", "router"], "30s")


NOBODY = 65534
NOBODYS = """\
name: innocent
hosts:
  me:
    local: true
    commands:
      systemctl: [sh, -c, "id > {marker}; exit 3", x]
      journalctl: [sh, -c, "id > {marker}; exit 3", x]
services:
  svc: {{host: me, unit: whatever, role: other}}
"""


@pytest.fixture
def nobodys_config(tmp_path: Path) -> tuple[Path, Path]:
    """A folder and its pdtui.yaml of another user's (nobody's), whose commands write a file as whoever runs them."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    shared, marker = tmp_path / "shared", tmp_path / "ran"
    shared.mkdir()
    config = shared / "pdtui.yaml"
    config.write_text(NOBODYS.format(marker=marker))
    os.chown(config, NOBODY, NOBODY)
    os.chown(shared, NOBODY, NOBODY)
    return config, marker


@pytest.mark.parametrize(("words", "suggested"), [
    (["--once"], "status"), (["status", "--once", "--json"], "status"), (["down"], "down"),
    (["restart", "svc"], "restart"), (["status", "--once", "PDTUI_CONFIG"], "status"),
], ids=["bare", "status-json", "down", "restart", "pdtui-config"])
def test_a_config_another_user_put_where_pdtui_looks_is_refused_and_never_run(nobodys_config, words, suggested):
    config, marker = nobodys_config
    env = {**os.environ, "HOME": str(config.parent.parent)}
    cwd = config.parent
    if words[-1] == "PDTUI_CONFIG":
        words, env["PDTUI_CONFIG"], cwd = words[:-1], str(config), config.parent.parent
    result = subprocess.run([sys.executable, "-m", "pdtui", *words], capture_output=True, text=True, timeout=60,
                            cwd=cwd, env=env)
    owner = f"uid {NOBODY} ({pwd.getpwuid(NOBODY).pw_name})"
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f"pdtui: not using the config found at {config}: it is owned by {owner}, not by you or "
                             f"root (mode 0644); if you trust it, name it: pdtui {suggested} {config}"
                             f"{' SERVICE' if suggested == 'restart' else ''}\n")
    assert not marker.exists(), "its commands ran"


def test_a_config_named_on_the_command_line_is_used_with_a_warning_and_every_face_names_it(nobodys_config):
    config, marker = nobodys_config
    table = pdtui("status", "--once", str(config), timeout=60)
    warning = (f"pdtui: warning: using {config} as named, though it is owned by uid {NOBODY} "
               f"({pwd.getpwuid(NOBODY).pw_name}), not by you or root (mode 0644)")
    assert table.stderr.splitlines() == [warning] and marker.exists(), table.stderr
    assert table.stdout.splitlines()[0] == f"config {config}"
    as_json = pdtui("status", "--once", "--json", str(config), timeout=60)
    assert json.loads(as_json.stdout)["config"] == str(config)


def test_a_reader_that_goes_away_ends_pdtui_quietly(tmp_path):
    config = tmp_path / "pd.yaml"
    config.write_text((data_dir("sample_configs") / "reference.yaml").read_text())
    pdtui = subprocess.Popen([sys.executable, "-m", "pdtui", "check", str(config)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert pdtui.stdout is not None and pdtui.stderr is not None
    pdtui.stdout.close()          # as `| head -0` does, before pdtui prints
    err = pdtui.stderr.read().decode()
    assert pdtui.wait(timeout=60) == 128 + signal.SIGPIPE and "Traceback" not in err, err

