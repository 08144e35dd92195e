"""The sim's systemctl and supervisor: lifecycle, states, exit codes, invocations, cleanup by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdtui.sim.sandbox import Sandbox
from tests.conftest_sim import assert_nothing_left, gone, wait_until

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]




def ctl(sandbox: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sandbox.commands["systemctl"], *args], capture_output=True, text=True, timeout=60)


def show(sandbox: Sandbox, unit: str) -> dict[str, str]:
    out = ctl(sandbox, "show", "-p", "ActiveState,SubState,MainPID,NRestarts,InvocationID,ExecMainStatus,"
              "UnitFileState,LoadState", unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def journal(sandbox: Sandbox, *args: str) -> list[dict]:
    out = subprocess.run([*sandbox.commands["journalctl"], "-o", "json", "--all", *args],
                         capture_output=True, check=True, timeout=30).stdout
    return [json.loads(line) for line in out.splitlines()]


def messages(sandbox: Sandbox, *args: str) -> list[str]:
    return [e["MESSAGE"] for e in journal(sandbox, *args)]


def test_start_makes_unit_active_with_its_child_running(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER, description="A sleeper")
    assert ctl(sandbox, "start", unit).returncode == 0
    props = show(sandbox, unit)
    assert props["ActiveState"] == "active" and props["SubState"] == "running"
    assert not gone(int(props["MainPID"])) and len(props["InvocationID"]) == 32
    result = ctl(sandbox, "is-active", "sleeper")
    assert (result.returncode, result.stdout) == (0, "active\n")
    wait_until(lambda: "up" in messages(sandbox, "-u", unit))
    assert messages(sandbox, "-u", unit)[0] == "Started sleeper.service - A sleeper."


def test_starting_an_active_unit_keeps_its_invocation(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER)
    ctl(sandbox, "start", unit)
    before = show(sandbox, unit)
    assert ctl(sandbox, "start", unit).returncode == 0
    assert show(sandbox, unit)["InvocationID"] == before["InvocationID"]
    assert show(sandbox, unit)["MainPID"] == before["MainPID"]


def test_stop_ends_the_processes_and_logs_like_systemd(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER, description="A sleeper")
    ctl(sandbox, "start", unit)
    pid = int(show(sandbox, unit)["MainPID"])
    assert ctl(sandbox, "stop", unit).returncode == 0
    assert gone(pid)
    assert show(sandbox, unit)["ActiveState"] == "inactive" and show(sandbox, unit)["MainPID"] == "0"
    result = ctl(sandbox, "is-active", unit)
    assert (result.returncode, result.stdout) == (3, "inactive\n")
    assert messages(sandbox, "-u", unit)[-3:] == ["Stopping sleeper.service - A sleeper...",
                                                  "sleeper.service: Deactivated successfully.",
                                                  "Stopped sleeper.service - A sleeper."]


def test_two_runs_have_different_invocations_and_match_filters_split_them(sandbox):
    unit = sandbox.add_unit("echo", [sys.executable, "-c", "import os; print('run', os.environ['INVOCATION_ID'])"])
    ids = []
    for _ in range(2):
        ctl(sandbox, "start", unit)
        wait_until(lambda: show(sandbox, unit)["ActiveState"] == "inactive")
        ids.append(show(sandbox, unit)["InvocationID"])
    assert ids[0] != ids[1]
    for inv in ids:
        assert messages(sandbox, "-u", unit, f"_SYSTEMD_INVOCATION_ID={inv}") == [f"run {inv}"]
        pid1 = messages(sandbox, "-u", unit, f"INVOCATION_ID={inv}")
        assert pid1 == ["Started echo.service.", "echo.service: Deactivated successfully."]


def test_a_units_temporary_files_are_kept_in_the_sandbox_not_the_machines_tmp(sandbox):
    unit = sandbox.add_unit("tmp", [sys.executable, "-c", "import tempfile; print(tempfile.mkstemp()[1])"])
    assert ctl(sandbox, "start", unit).returncode == 0
    wait_until(lambda: len(messages(sandbox, "-u", unit)) >= 2)
    made = Path(next(m for m in messages(sandbox, "-u", unit) if m.startswith("/")))
    assert made.parent == sandbox.root / "tmp" and made.exists(), made


def test_failing_process_marks_unit_failed_with_systemd_lines(sandbox):
    unit = sandbox.add_unit("bad", [sys.executable, "-c", "import sys; print('oops', file=sys.stderr); sys.exit(1)"],
                            description="Bad")
    ctl(sandbox, "start", unit)
    wait_until(lambda: show(sandbox, unit)["ActiveState"] == "failed")
    assert show(sandbox, unit)["ExecMainStatus"] == "1"
    entries = journal(sandbox, "-u", unit)
    assert [e["MESSAGE"] for e in entries][-3:] == [
        "oops", "bad.service: Main process exited, code=exited, status=1/FAILURE",
        "bad.service: Failed with result 'exit-code'."]
    # stderr shares stdout's stream to journald: its lines have the stream's PRIORITY, 6, not 3
    assert entries[-3]["PRIORITY"] == "6" and entries[-3]["_SYSTEMD_UNIT"] == unit
    assert ctl(sandbox, "is-active", unit).returncode == 3


def test_restart_on_failure_restarts_in_new_invocations_until_the_start_limit(sandbox):
    """What tests/integration/test_systemd_conformance.py compares with a real systemd, where none can boot."""
    unit = "looper.service"
    sandbox.store.unit_path(unit).write_text(
        "[Unit]\nStartLimitIntervalSec=600\nStartLimitBurst=3\n\n[Service]\n"
        "ExecStart=/bin/sh -c 'echo try; exit 3'\nRestart=on-failure\nRestartSec=0.1\n")
    assert ctl(sandbox, "start", unit).returncode == 0
    wait_until(lambda: show(sandbox, unit)["ActiveState"] == "failed")
    assert {k: show(sandbox, unit)[k] for k in ("NRestarts", "ExecMainStatus")} == {"NRestarts": "3", "ExecMainStatus": "3"}
    runs = {e["_SYSTEMD_INVOCATION_ID"] for e in journal(sandbox, "-u", unit) if e["_PID"] != "1"}
    assert len(runs) == 3 and show(sandbox, unit)["InvocationID"] in runs
    assert messages(sandbox, "-u", unit)[-3:] == ["looper.service: Start request repeated too quickly.",
                                                  "looper.service: Failed with result 'exit-code'.",
                                                  "Failed to start looper.service."]
    refused = ctl(sandbox, "start", unit)
    assert (refused.returncode, refused.stderr.splitlines()[0]) == (
        1, "Job for looper.service failed because the control process exited with error code.")
    assert ctl(sandbox, "reset-failed", unit).returncode == 0 and ctl(sandbox, "start", unit).returncode == 0


def test_missing_executable_fails_with_status_203(sandbox):
    unit = sandbox.add_unit("ghost", ["/nonexistent/binary"])
    assert ctl(sandbox, "start", unit).returncode == 0
    assert show(sandbox, unit)["ActiveState"] == "failed" and show(sandbox, unit)["ExecMainStatus"] == "203"


@pytest.mark.parametrize("verb, message, code", [
    ("start", "Failed to start nope.service: Unit nope.service not found.", 5),
    ("stop", "Failed to stop nope.service: Unit nope.service not loaded.", 5),
    ("restart", "Failed to restart nope.service: Unit nope.service not found.", 5),
    ("enable", "Failed to enable unit: Unit file nope.service does not exist.", 1),
])
def test_unknown_unit_uses_systemctl_wording(sandbox, verb, message, code):
    result = ctl(sandbox, verb, "nope")
    assert (result.returncode, result.stderr.strip()) == (code, message)


def test_unknown_unit_queries(sandbox):
    result = ctl(sandbox, "is-active", "nope")
    assert (result.returncode, result.stdout) == (3, "inactive\n")     # systemd 252's: 3, not 4 (LSB's "unknown")
    props = show(sandbox, "nope")
    assert props["LoadState"] == "not-found" and props["ActiveState"] == "inactive" and props["InvocationID"] == ""
    assert ctl(sandbox, "status", "nope").returncode == 4


def test_enable_now_starts_and_disable_now_stops(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER)
    assert ctl(sandbox, "is-enabled", unit).stdout == "disabled\n"
    assert ctl(sandbox, "enable", "--now", unit).returncode == 0
    assert show(sandbox, unit)["UnitFileState"] == "enabled" and show(sandbox, unit)["ActiveState"] == "active"
    assert ctl(sandbox, "is-enabled", unit).returncode == 0
    assert ctl(sandbox, "disable", "--now", unit).returncode == 0
    assert show(sandbox, unit)["UnitFileState"] == "disabled" and show(sandbox, unit)["ActiveState"] == "inactive"


def test_restart_gives_a_new_invocation(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER)
    ctl(sandbox, "start", unit)
    first = show(sandbox, unit)
    assert ctl(sandbox, "restart", unit).returncode == 0
    second = show(sandbox, unit)
    assert second["ActiveState"] == "active" and second["InvocationID"] != first["InvocationID"]
    assert gone(int(first["MainPID"]))


def test_status_and_show_value(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER, description="A sleeper")
    ctl(sandbox, "start", unit)
    status = ctl(sandbox, "status", "--no-pager", unit)
    assert status.returncode == 0 and "sleeper.service - A sleeper" in status.stdout
    assert "Active: active (running)" in status.stdout
    assert ctl(sandbox, "show", "-p", "ActiveState", "--value", unit).stdout == "active\n"


def test_unknown_verb_is_one_line(sandbox):
    result = ctl(sandbox, "frobnicate", "x")
    assert (result.returncode, result.stderr) == (1, "Unknown command verb 'frobnicate'.\n")


def test_child_ignoring_sigterm_is_killed_after_the_stop_timeout(sandbox):
    stubborn = [sys.executable, "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
                "time.sleep(60)"]
    unit = sandbox.add_unit("stubborn", stubborn, stop_timeout=0.3)
    ctl(sandbox, "start", unit)
    wait_until(lambda: "up" in messages(sandbox, "-u", unit))
    pid = int(show(sandbox, unit)["MainPID"])
    assert ctl(sandbox, "stop", unit).returncode == 0
    assert gone(pid) and show(sandbox, unit)["ActiveState"] == "failed"
    assert "stubborn.service: Failed with result 'timeout'." in messages(sandbox, "-u", unit)


def test_stop_all_leaves_no_process_even_after_a_supervisor_was_killed(sandbox):
    units = [sandbox.add_unit(f"s{i}", SLEEPER) for i in range(2)]
    for unit in units:
        ctl(sandbox, "start", unit)
    states = [json.loads((sandbox.root / "state" / f"{u}.json").read_text()) for u in units]
    pids = [pid for s in states for pid in (s["supervisor"][0], s["child"][0])]
    os.kill(states[0]["supervisor"][0], signal.SIGKILL)        # a crash leaves an orphaned child behind
    wait_until(lambda: gone(states[0]["supervisor"][0]))
    assert not gone(states[0]["child"][0])
    assert show(sandbox, units[0])["ActiveState"] == "failed"
    sandbox.stop_all()
    assert all(gone(pid) for pid in pids)


def test_wrappers_in_bin_dir_work_from_any_directory(sandbox, tmp_path):
    unit = sandbox.add_unit("sleeper", SLEEPER)
    env = {"PATH": f"{sandbox.bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(["systemctl", "start", unit], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert subprocess.run(["systemctl", "is-active", unit], cwd="/", env=env, capture_output=True,
                          text=True, timeout=60).stdout == "active\n"
    out = subprocess.run(["journalctl", "-u", unit, "-o", "cat", "--no-pager"], cwd="/", env=env,
                         capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("Started sleeper.service.")


def test_a_crashing_worker_unit_leaves_its_traceback_in_the_journal(sandbox):
    from pdtui.sim.ports import free_port
    argv = [sys.executable, "-m", "pdtui.sim.worker", "--role", "decode", "--port", str(free_port()),
            "--startup", "0.2", "--fail", "oom"]
    unit = sandbox.add_unit("decode", argv, description="SGLang decode")
    ctl(sandbox, "start", unit)
    wait_until(lambda: show(sandbox, unit)["ActiveState"] == "failed")
    inv = show(sandbox, unit)["InvocationID"]
    own = journal(sandbox, "-u", unit, f"_SYSTEMD_INVOCATION_ID={inv}")
    oom = next(e for e in own if str(e["MESSAGE"]).startswith("torch.OutOfMemoryError"))  # the weight loader's bar,
    # redrawn by carriage returns, is journaled as bytes (a list), as journald does with a field it cannot print
    assert oom["PRIORITY"] == "6" and own[0]["MESSAGE"].split("] ", 1)[1].startswith("server_args=")
    assert messages(sandbox, "-u", unit)[-1] == "decode.service: Failed with result 'exit-code'."


def test_concurrent_starts_spawn_one_run(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER)
    starts = [subprocess.Popen([*sandbox.commands["systemctl"], "start", unit]) for _ in range(3)]
    assert [p.wait(60) for p in starts] == [0, 0, 0]
    out = subprocess.run([*sandbox.commands["journalctl"], "-u", unit, "-o", "cat", "_PID=1"],
                         capture_output=True, text=True, timeout=30).stdout
    assert out.count("Started sleeper.service.") == 1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
@pytest.mark.parametrize("delay", [0.0, 0.03, 0.06, 0.1, 0.15, 0.25])
def test_stop_all_right_after_an_interrupted_start_leaves_nothing(sandbox, delay, sig):
    """Ctrl-C (or SIGKILL, as a cancelled command gets) reaches a ``systemctl start`` mid-spawn; its caller stops
    the sandbox at once."""
    unit = sandbox.add_unit("sleeper", SLEEPER)
    start = subprocess.Popen([*sandbox.commands["systemctl"], "start", unit], start_new_session=True)
    time.sleep(delay)
    os.killpg(start.pid, sig)
    sandbox.stop_all()
    start.wait(60)
    assert_nothing_left(sandbox.root)


def test_stop_all_stops_a_supervisor_no_state_file_names(sandbox):
    """What a ``systemctl start`` killed between spawning its supervisor and recording it leaves behind."""
    from pdtui.sim.python import sim_python
    from pdtui.sim.systemctl import package_env

    unit = sandbox.add_unit("sleeper", SLEEPER)
    orphan = subprocess.Popen([*sim_python("pdtui.sim.supervisor"), "--root", str(sandbox.root), unit],
                              env=package_env(), start_new_session=True)
    os.kill(orphan.pid, signal.SIGSTOP)      # held before it can record itself (or start its unit)
    # A process's command line reads empty until its exec is done: wait for it, as stop_all finds it by it.
    wait_until(lambda: b"pdtui.sim.supervisor" in Path(f"/proc/{orphan.pid}/cmdline").read_bytes())
    assert not (sandbox.root / "state" / f"{unit}.json").exists()
    sandbox.stop_all()
    orphan.wait(30)               # it ends: subprocess.TimeoutExpired otherwise
    assert_nothing_left(sandbox.root)


def test_stop_all_works_from_a_fresh_sandbox_object_after_a_crash(sandbox):
    unit = sandbox.add_unit("sleeper", SLEEPER)
    ctl(sandbox, "start", unit)
    pid = int(show(sandbox, unit)["MainPID"])
    (sandbox.root / "units" / unit).unlink()    # even a unit whose file is gone
    Sandbox(sandbox.root).stop_all()
    assert gone(pid)


def test_one_start_of_several_units_starts_each_once_and_names_the_missing_one(sandbox):
    a, b = sandbox.add_unit("a", SLEEPER), sandbox.add_unit("b", SLEEPER)
    result = ctl(sandbox, "start", a, "nope", b, a)
    assert result.returncode == 5
    assert result.stderr == "Failed to start nope.service: Unit nope.service not found.\n"
    assert show(sandbox, a)["ActiveState"] == show(sandbox, b)["ActiveState"] == "active"
    started = messages(sandbox, "_PID=1")
    assert started.count("Started a.service.") == 1 and started.count("Started b.service.") == 1
