"""The ``--web`` options: what goes together, one line for what does not, and the command each session runs."""

from __future__ import annotations

import sys

import pytest

from pdtui.cli import _parser, main
from pdtui.support.exits import EXIT_USAGE
from pdtui.web.options import ACT, LOOPBACK, REFUSED, WATCH, WebOptions, is_loopback, refusal, session_command, web_options
from pdtui.web.run import _announce, tls_context


def parsed(*argv: str):
    return _parser().parse_args(list(argv))


def test_without_web_the_options_are_the_defaults():
    assert web_options(parsed("status", "x.yaml")) == WebOptions(LOOPBACK, 0, False)


def test_the_bounds_and_tls_as_given_and_by_default():
    given = web_options(parsed("status", "--web", "--max-sessions", "2", "--idle-minutes", "0.5", "--cert", "c.pem",
                               "--key", "k.pem"))
    assert given == WebOptions(LOOPBACK, 0, False, 2, 30.0, "c.pem", "k.pem") and given.tls
    default = web_options(parsed("status", "--web"))
    assert isinstance(default, WebOptions) and (default.max_sessions, default.idle, default.tls) == (4, 3600.0, False)


def test_off_loopback_without_tls_the_warning_says_the_token_and_the_page_cross_in_clear_text(capsys):
    _announce(WebOptions("0.0.0.0", 8123, True), 8123, "tok")
    err = capsys.readouterr().err
    assert "anyone who reaches" in err
    assert ("no TLS: the token, the page and the deployment's logs cross the network in clear text; give --cert and "
            "--key to serve https") in err
    _announce(WebOptions("0.0.0.0", 8123, True, cert="c.pem", key="k.pem"), 8123, "tok")
    captured = capsys.readouterr()
    assert "https://" in captured.out and "clear text" not in captured.err
    _announce(WebOptions(), 8123, None)
    assert capsys.readouterr().err == ""


def test_a_certificate_that_cannot_serve_is_one_line(tmp_path):
    (tmp_path / "c.pem").write_text("not a certificate\x1b]52;c;x\x07\n")
    missing = tls_context(WebOptions(cert=str(tmp_path / "none.pem"), key=str(tmp_path / "none.key")))
    assert isinstance(missing, str) and missing.endswith("cannot serve TLS with them: No such file or directory")
    garbled = tls_context(WebOptions(cert=str(tmp_path / "c.pem"), key=str(tmp_path / "c.pem")))
    assert isinstance(garbled, str) and garbled.startswith("--cert ") and "cannot serve TLS with them" in garbled
    assert "\n" not in garbled and "\x1b" not in garbled
    assert tls_context(WebOptions()) is None


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
    (("status", "--max-sessions", "2"), "--max-sessions goes with --web"),
    (("status", "--idle-minutes", "5"), "--idle-minutes goes with --web"),
    (("demo", "--cert", "c.pem", "--key", "k.pem"), "--cert goes with --web"),
    (("status", "--web", "--max-sessions", "0"), "--max-sessions 0: give 1 to 1000 sessions served at once"),
    (("status", "--web", "--idle-minutes", "-1"), "--idle-minutes -1: give 0 (never) to 100000 minutes"),
    (("status", "--web", "--idle-minutes", "nan"), "--idle-minutes nan: give 0 (never) to 100000 minutes"),
    (("status", "--web", "--cert", "c.pem"), "--cert and --key go together: the certificate chain and its private key, "
                                               "both PEM files"),
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
