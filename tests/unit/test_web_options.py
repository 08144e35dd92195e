"""The ``--web`` options: what goes together, one line for what does not, and the command each session runs."""

from __future__ import annotations

import sys

import pytest

from pdtui.cli import _parser, main
from pdtui.support.exits import EXIT_USAGE
from pdtui.web.options import ACT, LOOPBACK, REFUSED, WATCH, WebOptions, is_loopback, refusal, session_command, web_options


def parsed(*argv: str):
    return _parser().parse_args(list(argv))


def test_without_web_the_options_are_the_defaults():
    assert web_options(parsed("status", "x.yaml")) == WebOptions(LOOPBACK, 0, False)


def test_web_options_as_given():
    options = web_options(parsed("demo", "--web", "--port", "8123", "--host", "0.0.0.0", "--allow-actions"))
    assert options == WebOptions("0.0.0.0", 8123, True) and not options.loopback
    assert web_options(parsed("status", "--web")).loopback


@pytest.mark.parametrize(("argv", "line"), [
    (("status", "--port", "8000"), "--port goes with --web"),
    (("demo", "--host", "0.0.0.0"), "--host goes with --web"),
    (("status", "--allow-actions"), "--allow-actions goes with --web"),
    (("demo", "--web", "--headless"), "--web serves the TUI: it does not go with --headless"),
    (("status", "--web", "--json"), "--web serves the TUI: it does not go with --json"),
    (("status", "--web", "--once"), "--web serves the TUI: it does not go with --once"),
    (("status", "--web", "--port", "70000"), "--port 70000: a port is 0 to 65535 (0: a free one)"),
    (("status", "--web", "--host", " "), "--host: give an address or host name to listen on"),
    (("status", "--web", "--served", "act"), "--served is given by the web server to its sessions, not with --web"),
])
def test_what_does_not_go_together_is_one_line(argv, line):
    assert web_options(parsed(*argv)) == line


@pytest.mark.parametrize("argv", [["status", "--port", "8000"], ["demo", "--web", "--json"], ["demo", "--web", "--port", "-1"]])
def test_the_command_line_says_it_in_one_line_and_exits_2(argv, capsys):
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("pdtui: ") and err.count("\n") == 1 and "Traceback" not in err


def test_bare_pdtui_web_goes_to_status(capsys):
    assert main(["--web", "--once"]) == EXIT_USAGE      # --once is status's own: bare pdtui --web is status --web
    assert capsys.readouterr().err == "pdtui: --web serves the TUI: it does not go with --once\n"


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.3.4.5", True), ("localhost", True),
                                                ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False),
                                                ("10.1.2.3", False), ("gpu0.example", False)])
def test_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_only_a_watch_session_refuses():
    assert refusal(WATCH) == REFUSED and refusal(ACT) == "" and refusal(None) == ""


def test_a_session_runs_status_of_the_same_config_in_the_mode_the_server_picks():
    args = parsed("status", "/etc/pd.yaml", "--web", "--no-smoke", "--theme", "light", "--accept-new")
    assert session_command("/etc/pd.yaml", args, WATCH) == [
        sys.executable, "-m", "pdtui", "status", "/etc/pd.yaml", "--served", "watch", "--theme", "light",
        "--no-smoke", "--accept-new"]
    demo = parsed("demo", "--web")
    assert session_command("/tmp/sim/demo.yaml", demo, ACT)[3:] == [
        "status", "/tmp/sim/demo.yaml", "--served", "act", "--theme", "dark"]
