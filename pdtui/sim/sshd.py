"""A real OpenSSH ``sshd`` on 127.0.0.1 for a simulated host, with throw-away keys.

The sim's hosts are reached the way real ones are: over SSH. :class:`ServerFactory`
starts OpenSSH's ``sshd`` on a free loopback port with a fresh host key, trusting
one client key; where ``sshd`` is not installed (or ``PDTUI_TEST_SSHD=asyncssh``) it
starts this module instead (``python -m pdtui.sim.sshd``), which serves the same
contract with asyncssh's own server. Either way the server is a child process
stopped by its PID, logs one ``Accepted publickey`` line per connection (LogLevel
VERBOSE: that is how connections are counted, at the server), puts ``bin_dir``
first on the session's PATH and allows direct-tcpip forwarding.

Commands put in ``bin_dir`` with :func:`write_command` record their PIDs in
``pid_dir``, so that anything still running when the servers stop is stopped by PID too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from pdtui.sim.ports import free_port
from pdtui.sim.systemctl import package_env

STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
READY_LINE = "Server listening on 127.0.0.1 port"
ACCEPTED_LINE = "Accepted publickey"
START_TIMEOUT = 10.0


def _sshd_binary() -> str | None:
    """OpenSSH's sshd (an absolute path: sshd re-executes itself), unless the fallback is forced."""
    if os.environ.get("PDTUI_TEST_SSHD") == "asyncssh":
        return None
    found = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.access(found, os.X_OK):
        return None
    try:  # the privilege separation directory sshd insists on
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    except OSError:
        return None
    return os.path.abspath(found)


def write_key(path: Path, key: asyncssh.SSHKey) -> Path:
    """A private key file as sshd and ssh want it: owner-only."""
    path.write_bytes(key.export_private_key("openssh"))
    path.chmod(0o600)
    return path


def public_line(key: asyncssh.SSHKey) -> str:
    """``ssh-ed25519 AAAA...``: the key as known_hosts and authorized_keys spell it."""
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


@dataclass
class SshServer:
    """One running server: where it listens, its keys, and what it has logged."""

    kind: str                   # "openssh" or "asyncssh"
    port: int
    host_key: asyncssh.SSHKey
    log_path: Path
    process: subprocess.Popen = field(repr=False)

    @property
    def fingerprint(self) -> str:
        return self.host_key.get_fingerprint("sha256")

    def known_hosts_line(self, key: asyncssh.SSHKey | None = None, port: int | None = None) -> str:
        """A known_hosts entry for this server (with another key, to fake a changed one; at a relay's port)."""
        return f"[127.0.0.1]:{port or self.port} {public_line(key or self.host_key)}\n"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def accepted_connections(self) -> int:
        return self.log().count(ACCEPTED_LINE)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _sshd_config(root: Path, port: int, host_key: Path, path: str) -> Path:
    config = root / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1\n"
        f"Port {port}\n"
        f"HostKey {host_key}\n"
        f"PidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
        "UsePAM no\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "StrictModes no\n"
        "UseDNS no\n"
        "PrintMotd no\n"
        "AllowTcpForwarding yes\n"
        "LogLevel VERBOSE\n"
        f"SetEnv PATH={path}\n"
    )
    return config


def _wait_ready(server: SshServer) -> None:
    """Until the server logs that it listens (it logs before accepting, so this is an event)."""
    deadline = time.monotonic() + START_TIMEOUT
    while READY_LINE not in server.log():
        if server.process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"{server.kind} server did not start:\n{server.log()}")
        time.sleep(0.01)


class ServerFactory:
    """Starts servers that all trust the same client key and share one PATH directory."""

    def __init__(self, root: Path, client_key: asyncssh.SSHKey) -> None:
        self.root = root
        self.client_key = client_key
        self.bin_dir = root / "bin"
        self.pid_dir = root / "pids"
        self.bin_dir.mkdir(parents=True)
        self.pid_dir.mkdir()
        self.servers: list[SshServer] = []

    def start(self) -> SshServer:
        root = self.root / f"server{len(self.servers)}"
        root.mkdir()
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        key_path = write_key(root / "host_ed25519", host_key)
        (root / "authorized_keys").write_text(public_line(self.client_key) + "\n")
        port = free_port()
        path = f"{self.bin_dir}:{STD_PATH}"
        log_path = root / "server.log"
        sshd = _sshd_binary()
        if sshd:
            argv = [sshd, "-D", "-e", "-f", str(_sshd_config(root, port, key_path, path))]
        else:
            argv = [sys.executable, "-m", "pdtui.sim.sshd", "--port", str(port), "--host-key", str(key_path),
                    "--authorized-keys", str(root / "authorized_keys"), "--path", path]
        with log_path.open("wb") as log:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=package_env())
        server = SshServer("openssh" if sshd else "asyncssh", port, host_key, log_path, process)
        self.servers.append(server)
        _wait_ready(server)
        return server

    def stop_all(self) -> None:
        for server in self.servers:
            server.stop()
        self._stop_commands()

    def _stop_commands(self) -> None:
        """Stop what the commands of `bin_dir` left running (sshd does not kill them when a client goes)."""
        for record in self.pid_dir.iterdir():
            pid = int(record.name)
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if str(self.bin_dir).encode() in cmdline:
                os.kill(pid, signal.SIGKILL)


def write_command(factory: ServerFactory, name: str, body: str) -> Path:
    """A Python command on the servers' PATH that records its PID so teardown can stop it."""
    script = factory.bin_dir / name
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        f"open(os.path.join({str(factory.pid_dir)!r}, str(os.getpid())), 'w').close()\n"
        f"{body}\n"
    )
    script.chmod(0o755)
    return script


# --- the fallback server, run as ``python -m pdtui.sim.sshd``: asyncssh serving the same contract as sshd ---


class _FallbackServer(asyncssh.SSHServer):
    """Key-only auth (authorized_client_keys does the check), direct-tcpip allowed, logs like sshd."""

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._peer = conn.get_extra_info("peername")

    def begin_auth(self, username: str) -> bool:
        self._user = username
        return True

    def auth_completed(self) -> None:
        print(f"{ACCEPTED_LINE} for {self._user} from {self._peer[0]} port {self._peer[1]} ssh2", flush=True)

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        return True


async def _run_command(process: asyncssh.SSHServerProcess, path: str) -> None:
    """Run the session's command with sh, its stdin, stdout and stderr wired to the channel as sshd does."""
    child = await asyncio.create_subprocess_shell(
        process.command or "", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "PATH": path})
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None   # all three piped
    feed = asyncio.ensure_future(_copy(process.stdin, child.stdin, close=True))
    await asyncio.gather(_copy(child.stdout, process.stdout), _copy(child.stderr, process.stderr))
    status = await child.wait()
    feed.cancel()
    if status < 0:
        process.exit_with_signal(signal.Signals(-status).name[3:])
    else:
        process.exit(status)


async def _copy(source: asyncssh.SSHReader | asyncio.StreamReader, target: asyncio.StreamWriter | asyncssh.SSHWriter,
                close: bool = False) -> None:
    """Bytes from ``source`` to ``target`` until EOF or a lost connection; ``close``: then close ``target``
    (the command's stdin: it sees EOF when the channel ends)."""
    try:
        while data := await source.read(65536):
            target.write(data)
    except (asyncssh.Error, OSError):
        pass
    if close:
        target.close()


async def _serve(args: argparse.Namespace) -> None:
    await asyncssh.create_server(
        _FallbackServer, "127.0.0.1", args.port, server_host_keys=[args.host_key],
        authorized_client_keys=args.authorized_keys, encoding=None,
        process_factory=lambda process: _run_command(process, args.path))
    print(f"{READY_LINE} {args.port}.", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="asyncssh stand-in for sshd on a simulated host")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host-key", required=True)
    parser.add_argument("--authorized-keys", required=True)
    parser.add_argument("--path", required=True)
    asyncio.run(_serve(parser.parse_args()))


if __name__ == "__main__":
    main()
