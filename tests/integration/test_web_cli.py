"""``pdtui demo --web`` and ``pdtui status --web`` as processes, their sessions opened as a browser's script opens
them (the page, then its websocket): the bring-up then the TUI, actions refused without the token, and nothing
left running once Ctrl-C or SIGTERM stopped the server."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp

from pdtui.sim.procs import ProcId, running_with
from tests.conftest_sim import assert_nothing_left, wait_until
from tests.web_helpers import Served, client, open_session, read_until, self_signed

DEMO = ["demo", "--web", "--router", "sim", "--startup", "1"]
REFERENCE = str(Path(__file__).parents[2] / "sample_configs" / "reference.yaml")


def all_ready(text: str) -> bool:
    """The TUI (its title says it watches) with its three panels READY."""
    screen = text[text.rfind("watching"):] if "watching" in text else ""
    return screen.count("✓ READY") >= 3


def sessions_of(sandbox: Path) -> list[ProcId]:
    return running_with(f"{sandbox}/demo.yaml\0--served\0".encode())


async def press(ws: aiohttp.ClientWebSocketResponse, keys: str) -> None:
    await ws.send_json(["stdin", keys])


async def test_demo_web_shows_the_bring_up_then_the_tui_refuses_actions_and_ctrl_c_leaves_nothing(tmp_path):
    sandbox = tmp_path / "sim"
    with Served(DEMO, tmp_path, sandbox) as served:
        assert served.token is None and "it watches only" in "".join(served.lines)
        async with client() as http:
            ws = await open_session(http, served.url)
            seen = bytearray()
            text = await read_until(ws, all_ready, seen=seen)
            assert "pdtui demo: bringing up the simulated deployment" in text and "✓ all ready" in text
            [session] = sessions_of(sandbox)
            await press(ws, "R")
            await read_until(ws, lambda t: "restart refused" in t[len(text):], seen=seen, timeout=15)
            code = served.stop(signal.SIGINT)            # Ctrl-C at the server's terminal
        err = served.stderr()
    assert code == 0, err
    assert "pdtui: web server stopped; 1 session ended" in err and "Traceback" not in err
    assert "pdtui demo: stopped the simulated deployment" in err
    assert not session.alive()
    assert_nothing_left(sandbox)


async def test_ctrl_c_while_a_tab_waits_for_the_bring_up_starts_no_app_and_leaves_nothing(tmp_path):
    sandbox = tmp_path / "sim"
    with Served([*DEMO[:-1], "5"], tmp_path, sandbox) as served:
        async with client() as http:
            ws = await open_session(http, served.url)
            await read_until(ws, lambda t: "decode   waiting" in t, timeout=30)
            code = served.stop(signal.SIGINT)
    err = served.stderr()
    assert code == 0 and "0 sessions ended" in err, err
    assert_nothing_left(sandbox)


async def test_with_allow_actions_only_the_token_acts_and_status_web_watches_the_same_deployment(tmp_path):
    sandbox = tmp_path / "sim"
    with Served([*DEMO, "--allow-actions"], tmp_path, sandbox) as served:
        token = served.token
        assert token and len(token) >= 24
        async with client() as http:
            without = await open_session(http, served.url.split("?")[0])
            with_token = await open_session(http, served.url)
            seen_without, seen_with = bytearray(), bytearray()
            before = await read_until(without, all_ready, seen=seen_without)
            await read_until(with_token, all_ready, seen=seen_with)
            await press(without, "R")
            await read_until(without, lambda t: "restart refused" in t[len(before):], seen=seen_without, timeout=15)
            await press(with_token, "R")
            confirm = await read_until(with_token, lambda t: "Restart prefill (sglang-dsv4-prefill" in t,
                                       seen=seen_with, timeout=15)
            assert "restart refused" not in confirm
            await press(with_token, "n")                 # asked, not done: the demo's prefill runs on
            await status_web_watches(sandbox / "demo.yaml", tmp_path, http)
            sessions = sessions_of(sandbox)
            assert len(sessions) == 2
            code = served.stop(signal.SIGTERM, group=False)   # SIGTERM to the server alone
        err = served.stderr()
    assert code == 0, err
    assert "pdtui: web server stopped; 2 sessions ended" in err
    assert not any(proc.alive() for proc in sessions)
    assert_nothing_left(sandbox)


async def status_web_watches(config: Path, tmp_path: Path, http: aiohttp.ClientSession) -> None:
    """``pdtui status CONFIG --web`` beside the demo: its session sees the three READY; stopping it stops no unit."""
    logs = tmp_path / "status"
    logs.mkdir()
    with Served(["status", str(config), "--web", "--no-smoke"], logs) as served:
        ws = await open_session(http, served.url)
        await read_until(ws, all_ready)
        [session] = running_with(f"{config}\0--served\0watch\0--theme\0dark\0--no-smoke\0".encode())   # not the demo's
        assert served.stop(signal.SIGINT) == 0
    assert not session.alive()
    assert "1 session ended" in served.stderr()
    wait_until(lambda: len(running_with(f"--root\0{config.parent}\0".encode())) >= 3)   # the units' supervisors


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "pdtui", "status", REFERENCE, "--web", "--port", str(port)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"pdtui: cannot listen on 127.0.0.1:{port}: address already in use"]


def test_a_bad_config_is_one_line_before_anything_listens(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhosts: {}\nservices: {a: {host: nowhere}}\n")
    result = subprocess.run([sys.executable, "-m", "pdtui", "status", str(bad), "--web"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "serving" not in result.stdout
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


async def test_status_web_with_a_certificate_serves_https_and_says_nothing_of_clear_text(tmp_path):
    cert, key = self_signed(tmp_path)
    with Served(["status", REFERENCE, "--web", "--allow-actions", "--cert", str(cert), "--key", str(key)],
                tmp_path) as served:
        assert served.url.startswith(f"https://127.0.0.1:{served.port}/?token=")
        async with client() as http, http.get(served.url, ssl=ssl.create_default_context(cafile=str(cert))) as page:
            assert page.status == 200 and str(page.url) == f"https://127.0.0.1:{served.port}/"
        assert served.stop(signal.SIGINT) == 0
    assert "clear text" not in served.stderr()


def test_a_certificate_that_cannot_serve_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    result = subprocess.run([sys.executable, "-m", "pdtui", "status", REFERENCE, "--web", "--cert",
                             str(tmp_path / "cert.pem"), "--key", str(tmp_path / "cert.pem")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "serving" not in result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("pdtui: --cert ") and "cannot serve TLS with them: not a PEM certificate chain" in line
