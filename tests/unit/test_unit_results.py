"""How a unit's run ended, in words (pdtui/targets/systemd/unit_results.py), from what systemd 252 reported here."""

from pdtui.targets.systemd.unit_results import ended, over, telling


def show(result: str, code: str, status: str) -> dict[str, str]:
    return {"Result": result, "ExecMainCode": code, "ExecMainStatus": status}


def test_a_plain_exit_is_its_status():
    assert ended(show("exit-code", "1", "3")) == "exit status 3"


def test_an_exec_failure_names_systemds_203_and_what_to_look_at():
    assert ended(show("exit-code", "1", "203")) == ("exit status 203/EXEC: systemd could not run its ExecStart: a "
                                                    "wrong path, often a venv's python")


def test_systemds_other_own_statuses_are_named_as_systemds():
    assert ended(show("exit-code", "1", "217")) == "exit status 217/USER: its User= does not exist"
    assert ended(show("exit-code", "1", "226")) == ("exit status 226/NAMESPACE: systemd's own, set before its "
                                                    "ExecStart ran")


def test_a_signal_is_named_not_read_as_an_exit_status():
    assert ended(show("signal", "2", "9")) == "killed by signal 9/KILL"
    assert ended(show("core-dump", "3", "11")) == "dumped core on signal 11/SEGV"


def test_results_systemd_decides_are_said_by_their_meaning():
    assert ended(show("oom-kill", "2", "9")) == "killed by the kernel's OOM killer, out of host memory"
    assert ended(show("timeout", "2", "15")).startswith("systemd's own timeout ran out")
    assert ended(show("start-limit-hit", "0", "0")).startswith("started too often: systemd's start limit")


def test_an_unknown_status_is_said_as_it_is():
    assert ended({}) == "exit status ?"


def test_telling_quotes_systemds_first_line_on_why_without_the_units_name():
    lines = ["Started x.service.",
             "x.service: Failed to locate executable /v/bin/python: No such file or directory",
             "x.service: Failed at step EXEC spawning /v/bin/python: No such file or directory",
             "x.service: Main process exited, code=exited, status=203/EXEC"]
    assert telling(lines, "x.service") == "Failed to locate executable /v/bin/python: No such file or directory"
    assert telling(["x.service: A process of this unit has been killed by the OOM killer."], "x.service") == (
        "A process of this unit has been killed by the OOM killer.")
    assert telling(lines[:1] + lines[3:], "x.service") is None


def look(active: str, sub: str, result: str = "success", code: str = "0", status: str = "0",
         invocation: str = "a1") -> dict[str, str]:
    return {"ActiveState": active, "SubState": sub, "Result": result, "ExecMainCode": code, "ExecMainStatus": status,
            "InvocationID": invocation, "NRestarts": "0"}


def test_a_running_unit_of_the_same_invocation_is_not_over():
    assert over("d.service", look("active", "running"), "a1") is None


def test_a_unit_killed_while_systemd_still_ends_its_group_ended_it_was_not_stopped():
    """systemd sets Result= before it enters stop-sigterm to end the rest of the group; a real vLLM unit whose
    processes were all killed was seen deactivating by pdtui's look."""
    assert over("d.service", look("deactivating", "stop-sigterm", "signal", "2", "9"), "a1") == (
        "unit d.service ended (killed by signal 9/KILL)")


def test_a_unit_stopped_cleanly_is_said_stopped_in_its_state():
    assert over("d.service", look("deactivating", "stop-sigterm"), "a1") == "unit d.service stopped (deactivating)"
    assert over("d.service", look("inactive", "dead"), "a1") == "unit d.service stopped (inactive)"


def test_a_failed_unit_waiting_to_restart_and_a_restarted_one_are_each_said():
    assert over("d.service", look("failed", "failed", "exit-code", "1", "1"), "a1") == (
        "unit d.service failed (exit status 1)")
    assert over("d.service", look("activating", "auto-restart", "signal", "2", "9"), "a1") == (
        "unit d.service ended (killed by signal 9/KILL); systemd restarts it (auto-restart, NRestarts=0)")
    assert over("d.service", look("active", "running", invocation="b2"), "a1") == "unit d.service restarted (NRestarts=0)"
