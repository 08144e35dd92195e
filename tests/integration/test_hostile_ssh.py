"""Hostile SSH peers (tests/hostile/ssh/peers.json) through every face that talks to a host: what a peer says (its
disconnect reason, its auth banner, a command's stdout or stderr, the signal that killed it) is shown inert, and no
peer makes a face crash.

Each peer is an asyncssh server on 127.0.0.1 whose key the config's known_hosts trusts: a trusted host turned
hostile, the worst case. It accepts any client key, then does what its corpus entry says to every command.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest
import yaml

from pdtui.sim.sshd import public_line
from tests.hostile import CORPUS, acting, confined, written
from tests.sshd import write_key

PEERS = json.loads((CORPUS / "ssh" / "peers.json").read_text())
FACES = {"status-table": ["status", "--once"], "status-json": ["status", "--once", "--json"],
         "up-lines": ["up", "--headless"], "up-json": ["up", "--json"], "check-probe": ["check", "--probe"],
         "units-diff": ["units", "--diff"]}


class _Peer(asyncssh.SSHServer):
    def __init__(self, peer: dict) -> None:
        self.peer = peer

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn

    def begin_auth(self, username: str) -> bool:
        if self.peer["does"] == "banner":
            self.conn.send_auth_banner(self.peer["text"])
        if self.peer["does"] == "disconnect":
            self.conn.disconnect(asyncssh.DISC_BY_APPLICATION, self.peer["text"])
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return True


def _answer(peer: dict):
    def handle(process: asyncssh.SSHServerProcess) -> None:
        if peer["does"] == "stderr":
            process.stderr.write(peer["text"])
            process.exit(1)
        elif peer["does"] == "stdout":
            process.stdout.write(peer["text"])
            process.exit(0)
        elif peer["does"] == "signal":
            process.exit_with_signal("KILL", True, peer["text"])
        else:
            process.exit(0)
    return handle


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _serve(loop: asyncio.AbstractEventLoop, peer: dict, key: asyncssh.SSHKey) -> tuple[asyncssh.SSHAcceptor, int]:
    async def serving() -> asyncssh.SSHAcceptor:
        return await asyncssh.create_server(lambda: _Peer(peer), "127.0.0.1", 0, server_host_keys=[key],
                                            process_factory=_answer(peer))
    server = asyncio.run_coroutine_threadsafe(serving(), loop).result(10)
    return server, server.sockets[0].getsockname()[1]


def _home(tmp_path: Path) -> dict[str, str]:
    """A $HOME of its own whose ~/.ssh/config offers a fresh client key: nothing of the machine's own is read."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    write_key(home / ".ssh" / "id_test", asyncssh.generate_private_key("ssh-ed25519"))
    (home / ".ssh" / "config").write_text("Host *\n    IdentityFile ~/.ssh/id_test\n")
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    return env | {"HOME": str(home)}


def _config(path: Path, port: int, known_hosts: Path) -> None:
    config = {"name": "hostile-ssh",
              "hosts": {"evil": {"address": "127.0.0.1", "port": port, "user": "root", "known_hosts": str(known_hosts)}},
              "services": {"svc": {"host": "evil", "unit": "svc.service", "role": "prefill", "port": 30000,
                                   "timeout": "3s", "launch": {"model": "m"}}}}
    path.write_text(yaml.safe_dump(config))


@pytest.mark.parametrize("face", FACES.values(), ids=FACES.keys())
@pytest.mark.parametrize("peer", PEERS, ids=[p["name"] for p in PEERS])
def test_what_a_hostile_peer_says_is_shown_inert(tmp_path, loop_thread, peer, face):
    key = asyncssh.generate_private_key("ssh-ed25519")
    server, port = _serve(loop_thread, peer, key)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {public_line(key)}\n")
    config = tmp_path / "hostile.yaml"
    _config(config, port, known_hosts)
    try:
        env, work = confined(tmp_path / "run", _home(tmp_path / "run"))
        done = subprocess.run([sys.executable, "-m", "pdtui", face[0], str(config), *face[1:]], capture_output=True,
                              timeout=90, env=env, cwd=work)
    finally:
        loop_thread.call_soon_threadsafe(server.close)
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert "Traceback" not in err, err
    assert acting(out) == [] and acting(err) == [], (out + err)[-2000:]
    assert done.returncode in (0, 1, 2)
    assert written(tmp_path / "run") == ["home/.ssh/config", "home/.ssh/id_test"]
    if peer["name"] == "disconnect-reason":
        assert "bye " in out + err        # told, as the characters it holds (escaped in JSON)
