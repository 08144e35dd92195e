import json

from pdtui.hosts.base import Result
from pdtui.sim.systemctl import job_failed
from pdtui.targets.systemd.commands import Commands, parse_show, sudo_needs_password, why_it_failed
from pdtui.targets.systemd.journal_json import OMITTED, decode_field, parse_entry


def test_commands_apply_wrappers_and_sudo():
    commands = Commands(("docker", "exec", "box", "systemctl"), ("journalctl",), sudo=True)
    assert commands.enable("r.service") == ["sudo", "-n", "docker", "exec", "box", "systemctl",
                                            "enable", "r.service"]
    assert commands.is_active("x.service") == ["sudo", "-n", "docker", "exec", "box", "systemctl",
                                               "is-active", "x.service"]


def test_follow_starts_from_a_cursor_some_seconds_back_or_at_the_head_and_never_shows_only_the_last_lines():
    commands = Commands()
    resumed = commands.follow(["a.service", "b.service"], cursor="s=1;i=2a")
    assert resumed[:2] == ["journalctl", "--follow"]
    assert "--cursor=s=1;i=2a" in resumed and "--unit=a.service" in resumed and "--unit=b.service" in resumed
    recent = commands.follow(["a.service"], recent=10.0)
    assert "--since=-10s" in recent and not any(a.startswith("--cursor") for a in recent)
    head = commands.follow(["a.service"])
    assert not any(a.startswith(("--cursor", "--since")) for a in head)
    for argv in (resumed, recent, head):
        # journalctl 252 -f --lines=0 -u A loses A's first lines; -f without --no-tail shows only the last 10.
        assert "--no-tail" in argv and not any(a.startswith(("--lines", "-n")) for a in argv)


def test_invocation_history_matches_the_invocations_own_lines_or_systemds_about_it():
    argv = Commands().invocation_history(["abc123"])
    assert argv[-3:] == ["_SYSTEMD_INVOCATION_ID=abc123", "+", "INVOCATION_ID=abc123"]
    assert "--all" in argv and "--follow" not in argv and not any(a.startswith("--until") for a in argv)


def test_parse_show():
    text = "ActiveState=active\nSubState=running\nMainPID=4242\nInvocationID=9f0e\nExecMainStatus=0\nbogus\n"
    assert parse_show(text) == {"ActiveState": "active", "SubState": "running", "MainPID": "4242",
                                "InvocationID": "9f0e", "ExecMainStatus": "0"}


def test_decode_field_shapes():
    assert decode_field("plain") == "plain"
    assert decode_field(None) == OMITTED
    assert decode_field([27, 91, 51, 50, 109, 104, 105]) == "\x1b[32mhi"
    assert decode_field([0xff, 0x41]) == "\ufffdA"
    assert decode_field(["one", "two"]) == "one\ntwo"


def entry(**fields):
    return json.dumps(fields).encode()


def test_parse_entry_of_a_service_line():
    e = parse_entry(entry(__CURSOR="s=a;i=1", __REALTIME_TIMESTAMP="1700000000123456", _PID="77",
                          PRIORITY="6", MESSAGE="hello", _SYSTEMD_UNIT="x.service",
                          _SYSTEMD_INVOCATION_ID="inv1"))
    assert (e.cursor, e.source, e.invocation, e.priority, e.message, e.system) == (
        "s=a;i=1", "x.service", "inv1", 6, "hello", False)
    assert abs(e.realtime - 1700000000.123456) < 1e-6


def test_parse_entry_of_a_pid1_line_uses_unit_and_invocation_id():
    e = parse_entry(entry(_PID="1", _SYSTEMD_UNIT="init.scope", UNIT="x.service", INVOCATION_ID="inv2",
                          MESSAGE="x.service: Failed with result 'exit-code'."))
    assert (e.source, e.invocation, e.system) == ("x.service", "inv2", True)


def test_parse_entry_of_systemds_executor_is_systemds_own_line():
    """Written from the process forked to run ExecStart, in the unit's cgroup, before the program runs (systemd 252
    as measured)."""
    e = parse_entry(entry(_PID="61", _SYSTEMD_UNIT="x.service", _SYSTEMD_INVOCATION_ID="inv3", UNIT="x.service",
                          INVOCATION_ID="inv3", SYSLOG_IDENTIFIER="(python)", PRIORITY="6",
                          MESSAGE="x.service: Failed to locate executable /v/bin/python: No such file or directory"))
    assert (e.source, e.invocation, e.system) == ("x.service", "inv3", True)


def test_parse_entry_of_systemds_executor_that_journald_could_not_attribute_is_still_systemds():
    """journald reads where a message came from once its process is gone: no _SYSTEMD_UNIT (systemd 252, loaded)."""
    e = parse_entry(entry(_PID="61", UNIT="x.service", INVOCATION_ID="inv3", PRIORITY="3",
                          MESSAGE="x.service: Failed at step EXEC spawning /v/bin/python: No such file or directory"))
    assert (e.source, e.invocation, e.system) == ("x.service", "inv3", True)


def test_parse_entry_of_a_server_line_naming_another_unit_is_the_servers():
    e = parse_entry(entry(_PID="77", _SYSTEMD_UNIT="x.service", _SYSTEMD_INVOCATION_ID="inv1", UNIT="y.service",
                          MESSAGE="hello"))
    assert (e.source, e.invocation, e.system) == ("x.service", "inv1", False)


def test_parse_entry_tolerates_junk():
    assert parse_entry(b"not json") is None
    assert parse_entry(b"[1, 2]") is None
    assert parse_entry(b'{"MESSAGE": [104, 105]}').message == "hi"


def test_sudo_password_detection():
    assert sudo_needs_password("sudo: a password is required")
    assert not sudo_needs_password("Failed to start x.service: Unit x.service not found.")


def test_show_asks_for_several_units_in_one_command():
    argv = Commands().show(["a.service", "b.service"])
    assert argv[:3] == ["systemctl", "show", "-p"] and argv[-2:] == ["a.service", "b.service"]
    assert "Id" in argv[3].split(",")


def test_parse_show_units_splits_blocks_by_id():
    from pdtui.targets.systemd.commands import parse_show_units
    text = "Id=a.service\nActiveState=active\n\nId=b.service\nLoadState=not-found\nActiveState=inactive\n"
    assert parse_show_units(text) == {
        "a.service": {"Id": "a.service", "ActiveState": "active"},
        "b.service": {"Id": "b.service", "LoadState": "not-found", "ActiveState": "inactive"}}


def test_a_units_processes_are_its_main_pid_and_everything_below_it():
    from pdtui.gpus.inventory import process_tree
    ps = "    1     0\n  100     1\n  101   100\n  102   101\n  200     1\n  garbage\n"
    assert process_tree(ps, 100) == {100, 101, 102}
    assert process_tree(ps, 300) == {300}


def test_a_start_refused_by_its_start_limit_is_told_by_its_job_line_not_by_what_to_type_next():
    refused = Result(("systemctl", "restart", "d.service"), 1, "", job_failed("d.service", "start-limit-hit") + "\n")
    assert why_it_failed(refused) == "Job for d.service failed because start of the service was attempted too often."
    missing = Result(("systemctl", "start", "x.service"), 5, "", "Failed to start x.service: Unit x.service not found.\n")
    assert why_it_failed(missing) == "Failed to start x.service: Unit x.service not found."


class TimedHost:
    """A host that answers at once and keeps the timeout each command was given."""

    name = "h"

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    async def run(self, argv: list[str], *, timeout: float, read_only: bool = False) -> Result:
        self.timeouts.append(timeout)
        return Result(tuple(argv), 0, "", "")


async def test_a_command_that_waits_for_its_job_gets_the_whole_deadline_and_a_look_only_the_command_timeout():
    from pdtui.engine.session import Session
    host = TimedHost()
    now = 1000.0
    session = Session("h", host, command_timeout=30.0, clock=lambda: now)   # type: ignore[arg-type]
    await session.command(["systemctl", "stop", "d.service"], now + 120.0, waits=True)
    await session.command(["systemctl", "show", "d.service"], now + 120.0)
    await session.command(["systemctl", "stop", "d.service"], now + 5.0, waits=True)
    assert host.timeouts == [120.0, 30.0, 5.0]
