"""Hostile HTTP answers (tests/hostile/http/) at a service's readiness check, through the headless faces of ``pdtui up``.

A server answers every request with one answer of the corpus, as its bytes; pdtui's readiness check asks it until
the service's timeout and says why it is not ready. What it shows of the answer is inert (a redirect is told as the
answer it is), and no answer makes it crash.
"""

from __future__ import annotations

import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.hostile import acting, confined, files, written

ANSWERS = files("http", ".http")


class _Answering(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            self.request.recv(65536)
            self.request.sendall(self.server.answer)      # type: ignore[attr-defined]
            self.request.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.fixture
def answering() -> Iterator[tuple[socketserver.ThreadingTCPServer, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Answering)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _config(sandbox, path: Path, port: int) -> None:
    unit = sandbox.add_unit("t-served", [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"])
    config = {"name": "hostile-http", "hosts": {"sim": {"local": True, "commands": sandbox.commands}},
              "services": {"served": {"host": "sim", "unit": unit, "role": "other", "port": port,
                                      "ready": {"http": "/health"}, "timeout": "2s"}}}
    path.write_text(yaml.safe_dump(config))


@pytest.mark.parametrize("face", [["--headless"], ["--json"]], ids=["lines", "json"])
@pytest.mark.parametrize("answer", ANSWERS, ids=[a.stem for a in ANSWERS])
def test_a_hostile_answer_is_told_inert(sandbox, tmp_path, answering, answer, face):
    server, port = answering
    server.answer = answer.read_bytes()       # type: ignore[attr-defined]
    config = tmp_path / "hostile.yaml"
    _config(sandbox, config, port)
    env, work = confined(tmp_path / "run")
    done = subprocess.run([sys.executable, "-m", "pdtui", "up", str(config), *face], capture_output=True, timeout=90,
                          env=env, cwd=work)
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert done.returncode == 1, err        # never ready: no answer of the corpus is a 200 with a whole body
    assert "Traceback" not in err
    assert acting(out) == [] and acting(err) == []
    assert written(tmp_path / "run") == []
    # the answer is told, as the check that asked for it: an SGLang server's /health is asked at /ready (no
    # generation) until it answers 404, which no answer of the corpus is
    assert "http /ready" in out
