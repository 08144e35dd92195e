"""Loopback sshd for the benches: pdtui.sim.sshd's servers, sharing one client key.

Every server is OpenSSH's ``sshd`` on 127.0.0.1 with throw-away keys (LogLevel
VERBOSE, so each connection logs one ``Accepted publickey`` line: that is how
connections are counted, at the server). pdtui reaches them through a throw-away
$HOME (asyncssh reads ~/.ssh/config there); the reference loop's ``ssh`` client
gets the same key and known_hosts through an ``-F`` config file, since OpenSSH
ignores $HOME.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import asyncssh

from pdtui.sim.sshd import ServerFactory, SshServer, write_key


class SshdPool:
    """sshd servers sharing one client key; stopped (by PID) on close."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="pdtui-bench-ssh-"))
        self.home = self.root / "home"
        ssh_dir = self.home / ".ssh"
        ssh_dir.mkdir(parents=True)
        self.client_key = asyncssh.generate_private_key("ssh-ed25519")
        self.identity = write_key(ssh_dir / "id_bench", self.client_key)
        self.known_hosts = ssh_dir / "known_hosts"
        self.known_hosts.touch()
        (ssh_dir / "config").write_text(f"Host *\n    IdentityFile {self.identity}\n")
        self.client_config = self.root / "ssh_config"
        self.client_config.write_text(
            "Host *\n"
            f"    IdentityFile {self.identity}\n"
            "    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {self.known_hosts}\n"
            "    StrictHostKeyChecking yes\n"
            "    BatchMode yes\n"
            "    ControlMaster no\n"
            "    LogLevel ERROR\n")
        os.environ["HOME"] = str(self.home)
        os.environ.pop("SSH_AUTH_SOCK", None)
        self.factory = ServerFactory(self.root / "sshd", self.client_key)

    def start(self) -> SshServer:
        server = self.factory.start()
        with self.known_hosts.open("a") as out:
            out.write(server.known_hosts_line())
        return server

    def host(self, server: SshServer, sandbox) -> dict:
        """A deployment ``hosts:`` entry reaching ``sandbox`` through ``server``."""
        return {"address": "127.0.0.1", "port": server.port, "known_hosts": str(self.known_hosts),
                "commands": {"systemctl": str(sandbox.bin_dir / "systemctl"),
                             "journalctl": str(sandbox.bin_dir / "journalctl")}}

    def ssh(self, server: SshServer, command: str) -> list[str]:
        """The argv of a fresh ``ssh`` running ``command`` there, as the reference loop does."""
        return ["ssh", "-F", str(self.client_config), "-p", str(server.port), "127.0.0.1", command]

    def close(self) -> None:
        self.factory.stop_all()
        shutil.rmtree(self.root, ignore_errors=True)
