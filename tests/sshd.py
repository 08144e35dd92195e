"""The real SSH server's pytest fixtures, and a TCP relay between client and server that a test can cut.

Its fixtures (``ssh_home``, ``sshd``, ``sshd_factory``, ``forwarder``, ...) are registered for every
test by tests/conftest.py. ``sshd_factory`` starts OpenSSH's ``sshd`` on 127.0.0.1 with throw-away keys in the
test's tmp dir through :mod:`pdtui.sim.sshd` (asyncssh's own server where ``sshd`` is not installed, or
``PDTUI_TEST_SSHD=asyncssh``); each server is stopped by its PID at teardown, and so is whatever the
commands of :func:`write_command` left running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest
import pytest_asyncio

from pdtui.hosts.ssh import SshHost
from pdtui.sim.ports import free_port
from pdtui.sim.sshd import ServerFactory, SshServer, write_command, write_key
from pdtui.targets.systemd.settings import HostConfig

__all__ = ["ServerFactory", "SshHome", "SshServer", "TcpForwarder", "free_port", "host_config", "trust", "write_command",
           "write_key"]


@dataclass
class SshHome:
    """A throw-away $HOME whose ~/.ssh/config points at a throw-away client key."""

    home: Path
    client_key: asyncssh.SSHKey

    @property
    def ssh_dir(self) -> Path:
        return self.home / ".ssh"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    def use_key(self, key: asyncssh.SSHKey) -> None:
        """Make ``key`` the identity ~/.ssh/config offers."""
        write_key(self.ssh_dir / "id_test", key)
        (self.ssh_dir / "config").write_text("Host *\n    IdentityFile ~/.ssh/id_test\n")


@pytest.fixture
def ssh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SshHome:
    """$HOME with ~/.ssh/config naming a fresh client key; no ssh-agent."""
    home = made_ssh_home(tmp_path)
    use_home(home, monkeypatch)
    return home


def made_ssh_home(folder: Path) -> SshHome:
    """A home in ``folder`` whose ~/.ssh/config names a fresh client key (not yet $HOME: :func:`use_home`)."""
    home = folder / "home"
    (home / ".ssh").mkdir(parents=True)
    ssh_home = SshHome(home, asyncssh.generate_private_key("ssh-ed25519"))
    ssh_home.use_key(ssh_home.client_key)
    return ssh_home


def use_home(home: SshHome, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``home`` $HOME, without an ssh-agent, for as long as ``monkeypatch`` lasts."""
    monkeypatch.setenv("HOME", str(home.home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture
def sshd_factory(tmp_path: Path, ssh_home: SshHome) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path / "sshd", ssh_home.client_key)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture
def sshd(sshd_factory: ServerFactory) -> SshServer:
    return sshd_factory.start()


def host_config(port: int | None, name: str = "gpu0", **overrides: object) -> HostConfig:
    """A deployment's host entry for a test server on 127.0.0.1."""
    return HostConfig(**{"name": name, "address": "127.0.0.1", "port": port, **overrides})


def trust(home: SshHome, server: SshServer, port: int | None = None) -> None:
    """Put the server's key in ~/.ssh/known_hosts (for its own port, or a relay's)."""
    with home.known_hosts.open("a") as out:
        out.write(server.known_hosts_line(port=port))


@pytest_asyncio.fixture
async def make_host(sshd_factory: ServerFactory):
    """``make_host(port, **kwargs)`` → an SshHost closed at teardown (before the servers stop)."""
    made: list[SshHost] = []

    def make(port: int | None, *, name: str = "gpu0", config: dict | None = None, **kwargs) -> SshHost:
        host = SshHost(host_config(port, name, **(config or {})), **kwargs)
        made.append(host)
        return host

    yield make
    for host in made:
        await host.close()


@pytest.fixture
def connect_attempts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The address of every SSH connection pdtui attempts, in order (asyncssh.connect, counted)."""
    attempts: list[str] = []
    real = asyncssh.connect

    async def counted(host: str, *args: object, **kwargs: object) -> asyncssh.SSHClientConnection:
        attempts.append(host)
        return await real(host, *args, **kwargs)

    monkeypatch.setattr(asyncssh, "connect", counted)
    return attempts


class TcpForwarder:
    """Relays 127.0.0.1:port to a target port; ``cut()`` drops every relayed connection at once."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.accepted = 0
        self.blocked = False        # while True, new connections are closed at once
        self.stalled = False        # while True, bytes are swallowed: a silently dead network
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> TcpForwarder:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def cut(self) -> None:
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.blocked:
            writer.transport.abort()
            return
        self.accepted += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except asyncio.CancelledError:   # the test's loop closing: end both sides quietly
            writer.transport.abort()
            up_writer.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if not self.stalled:
                    writer.write(data)
                    await writer.drain()
        except OSError:
            pass
        writer.transport.abort()


@pytest_asyncio.fixture
async def forwarder() -> Callable:
    """``await forwarder(port)`` → a started TcpForwarder, closed at teardown."""
    started: list[TcpForwarder] = []

    async def start(target_port: int) -> TcpForwarder:
        relay = await TcpForwarder(target_port).start()
        started.append(relay)
        return relay

    yield start
    for relay in started:
        await relay.close()
