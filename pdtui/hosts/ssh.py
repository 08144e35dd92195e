"""The SSH host: one asyncssh connection per host, every command, tail and probe a channel on it.

A bring-up talks to a host for minutes: a fresh SSH connection per command would
be slow and noisy in the host's auth log, so the connection is made once (on
first use, or by :meth:`SshHost.connect`) and kept alive. Host keys are always
verified against known_hosts; an unknown key is only trusted when the user said
``--accept-new``, a changed key never. When the connection drops, whatever ran on
it fails with :class:`HostDisconnected` (its fate is unknown, so nothing is
retried behind the caller's back) and the next use connects again with backoff.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shlex
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncssh

from pdtui.hosts.base import (
    LOOPBACK_ADDRESS,
    HostDisconnected,
    HostError,
    HostKeyChanged,
    HostKeyUnknown,
    HostNotFound,
    HostTimedOut,
    HostUnreachable,
    Result,
    StatusCallback,
    each_line,
    last_bytes,
    line_batches,
)
from pdtui.hosts.shared_reads import SharedReads
from pdtui.support.backoff import Backoff
from pdtui.support.text import inert

# sshd's MaxSessions is 10 by default; stay below it so one channel can always be opened by hand.
MAX_SESSIONS = 8
# How long the next use keeps reconnecting to a host that dropped before it gives up.
RECONNECT_FOR = 60.0
# Pauses before asking the resolver again when it could not answer (see _resolver_busy).
RESOLVE_AGAIN = (0.5, 1.0)
# How long leaving a stream waits for the server to confirm the channel is closed.
CLOSE_WAIT = 5.0
# Every remote command runs under this sh script, which stops it when the channel's stdin
# closes. sshd does not stop a command without a terminal when its channel or connection
# goes (it would die of SIGPIPE at its next write: a quiet `journalctl -f` may not write
# for hours), and it refuses signal requests for root logins. It does close the command's
# stdin, which pdtui never writes to nor closes itself: that is the signal.
# The watcher is a subshell reading with a builtin, so killing it leaves no orphan behind.
WATCHDOG = (
    'exec 3<&0; "$@" </dev/null 3<&- & cmd=$!; '
    '(while read -r _; do :; done; kill "$cmd") <&3 >/dev/null 2>&1 3<&- & watch=$!; '
    'exec 3<&-; wait "$cmd"; status=$?; { kill "$watch"; wait "$watch"; } 2>/dev/null; exit "$status"'
)
# The same with ``input``: its first line on the channel's stdin is the input in base64, which the shell keeps
# (`read` and `printf` are builtins: never an argv) and pipes decoded into the command; the channel's stdin then
# stays open, the watcher's signal as above.
WATCHDOG_INPUT = (
    'IFS= read -r pdtui_input || exit 70; exec 3<&0; '
    '{ printf %s "$pdtui_input" | base64 -d; } 3<&- | "$@" 3<&- & cmd=$!; pdtui_input=; '
    '(while read -r _; do :; done; kill "$cmd") <&3 >/dev/null 2>&1 3<&- & watch=$!; '
    'exec 3<&-; wait "$cmd"; status=$?; { kill "$watch"; wait "$watch"; } 2>/dev/null; exit "$status"'
)
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
AEAD_FIRST = "-gcm@openssh.com"
"""The ciphers asked for first unless ~/.ssh/config names its own (AES-GCM, as OpenSSH offers it): asyncssh reads
a journal's packets with a quarter less CPU than with ChaCha20-Poly1305, its default first (measured in
docs/benchmarks.md §4); both are authenticated encryption, and every sshd of the last decade offers both."""


class SshHost:
    """A machine reached over SSH (``config`` is a HostConfig: name, address, user, port, known_hosts)."""

    def __init__(self, config: Any, *, accept_new: bool = False, connect_timeout: float = 10,
                 keepalive: float = 15, on_status: StatusCallback | None = None,
                 max_sessions: int = MAX_SESSIONS, reconnect_for: float = RECONNECT_FOR) -> None:
        self.name: str = config.name
        self._config = config
        self._accept_new = accept_new
        self._connect_timeout = connect_timeout
        self._keepalive = keepalive
        self._on_status = on_status if on_status is not None else (lambda name, status, detail: None)
        self._reconnect_for = reconnect_for
        self._sessions = asyncio.Semaphore(max_sessions)
        self._reads = SharedReads(self.name, self._run_alone)
        self._lock = asyncio.Lock()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._attempts = 0
        self._failure: HostError | None = None
        self._told_failure: str | None = None   # what failure was told since the last connection
        self._ever_connected = False
        self._closed = False

    @property
    def target(self) -> str:
        """``user@address:port`` as configured, for messages."""
        user = f"{self._config.user}@" if self._config.user else ""
        port = f":{self._config.port}" if self._config.port else ""
        return f"{user}{self._config.address}{port}"

    async def connect(self) -> None:
        """Connect now rather than on first use (so that several hosts connect concurrently)."""
        await self._connection()

    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        """``argv`` in a session of its own; a read shares one with the reads asked at the same moment."""
        if read_only and input is None:
            return await self._reads.run(argv, timeout)
        return await self._run_alone(argv, timeout, input)

    async def _run_alone(self, argv: Sequence[str], timeout: float | None, input: bytes | None = None) -> Result:
        command = self._command(argv, WATCHDOG if input is None else WATCHDOG_INPUT)
        async with self._sessions:
            conn = await self._connection()
            process = await self._start(conn, command, argv)
            try:
                if input is not None:
                    process.stdin.write(base64.b64encode(input) + b"\n")
                async with asyncio.timeout(timeout):
                    out, err = await process.communicate()
            except TimeoutError:
                process.close()   # the watchdog stops the command
                raise HostTimedOut.after(self.name, argv, timeout) from None
            except asyncio.CancelledError:
                process.close()   # the watchdog stops the command
                raise
            except (asyncssh.Error, OSError):
                raise _disconnected(self, argv) from None
        if process.returncode is None:
            raise _no_exit_status(self, conn, argv)
        return Result(tuple(argv), process.returncode,
                      out.decode(errors="replace"), err.decode(errors="replace"))

    @asynccontextmanager
    async def stream(self, argv: Sequence[str]) -> AsyncIterator[SshLines]:
        command = self._command(argv)
        async with self._sessions:
            conn = await self._connection()
            process = await self._start(conn, command, argv)
            lines = SshLines(self, conn, process, argv)
            try:
                yield lines
            finally:
                await lines.finish()

    async def open_tcp(self, port: int, *, timeout: float | None = None,
                       address: str = LOOPBACK_ADDRESS) -> tuple[asyncssh.SSHReader, asyncssh.SSHWriter]:
        """A direct-tcpip channel to address:port as the host sees it (127.0.0.1: a port of its own).

        The reader and writer have the asyncio stream methods pdtui uses (read, write,
        drain, close, wait_closed). A closed port raises ConnectionRefusedError and a
        timeout ConnectionError, as for the local host.
        """
        conn = await self._connection()
        where = f"{address}:{port}"
        try:
            async with asyncio.timeout(timeout):
                return await conn.open_connection(address, port)
        except TimeoutError:
            raise ConnectionError(f"{self.name}: connecting to {where} timed out") from None
        except asyncssh.ChannelOpenError as exc:
            if exc.code == asyncssh.OPEN_CONNECT_FAILED:
                raise ConnectionRefusedError(f"{self.name}: {where}: {_one_line(exc.reason)}") from None
            raise HostError(f"{self.name}: sshd refused to forward to {where} "
                            f"({_one_line(exc.reason)}); is AllowTcpForwarding off?") from None
        except (asyncssh.Error, OSError):
            raise HostDisconnected(f"{self.name}: connection to {self.target} lost while opening {where}") from None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._reads.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()
        self._status("closed", "")

    # --- the connection ---

    async def _connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, made now if there is none; concurrent callers share one attempt."""
        if self._closed:
            raise HostError(f"{self.name}: host connection was closed")
        if isinstance(self._failure, HostNotFound):
            raise HostNotFound(str(self._failure))   # final: the name is not looked up again
        if self._conn is not None and not self._conn.is_closed():
            return self._conn
        seen = self._attempts + self._lock.locked()   # an attempt under way is shared too
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            if self._attempts != seen and self._failure is not None:
                raise type(self._failure)(str(self._failure))   # it failed while we waited
            self._attempts += 1
            try:
                conn = await self._establish()
            except HostError as exc:
                self._failure = exc
                raise
            self._failure = None
            if self._closed:
                conn.close()
                raise HostError(f"{self.name}: host connection was closed")
            self._conn = conn
            return conn

    async def _establish(self) -> asyncssh.SSHClientConnection:
        """Connect; after a drop, keep trying with backoff while the host is merely unreachable.

        Every use of a host that cannot be reached tries again (a journal tail, a
        preflight waiting for sshd): it is told once, until it is reached or fails
        otherwise, so the user reads one line, not two per attempt.
        """
        reconnecting = self._ever_connected
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._reconnect_for
        backoff = Backoff()
        if self._told_failure is None:
            self._status("reconnecting" if reconnecting else "connecting", self.target)
        while True:
            try:
                conn = await self._open()
            except HostError as exc:
                retrying = reconnecting and isinstance(exc, HostUnreachable) and loop.time() + backoff.delay < deadline
                self._tell_failure(exc, deadline - loop.time() if retrying else None)
                if not retrying:
                    raise
                await asyncio.sleep(backoff.next())
            else:
                self._ever_connected = True
                self._told_failure = None
                self._status("connected", self.target)
                return conn

    def _tell_failure(self, exc: HostError, trying_for: float | None) -> None:
        """``unreachable`` (it may pass) or ``error``, unless told already.

        An unreachable host is told once however its attempts fail (refused, then
        reset, then timed out: the same news); an error once per message.
        """
        unreachable = isinstance(exc, HostUnreachable)
        told = "unreachable" if unreachable else str(exc)
        if told == self._told_failure:
            return
        self._told_failure = told
        detail = str(exc) if trying_for is None else f"{exc}; trying again for up to {trying_for:.0f}s"
        self._status("unreachable" if unreachable else "error", detail)

    async def _open(self) -> asyncssh.SSHClientConnection:
        """One connection attempt; every failure becomes one HostError line."""
        try:
            # config=(): load ~/.ssh/config as connect() does; client_keys=None: no keys needed here.
            options = await asyncssh.SSHClientConnectionOptions.construct(
                config=(), host=self._config.address, client_keys=None)
            keys = _HostKeys(self._known_hosts_files(options), self._accept_new,
                             lambda note: self._status("connecting", note))
        except (OSError, ValueError) as exc:
            raise HostError(f"{self.name}: cannot read ~/.ssh/config or known_hosts: {_one_line(str(exc))}") from None
        pauses = iter(RESOLVE_AGAIN)
        ciphers = () if options.config.get("Ciphers") else _aead_first(options.encryption_algs)
        while True:
            try:
                return await self._ssh_connect(keys, ciphers)
            except (OSError, asyncssh.Error, ValueError) as exc:
                pause = next(pauses, None) if _resolver_busy(exc) else None
                if pause is None:
                    raise self._connect_error(exc, keys, options) from None
            await asyncio.sleep(pause)

    async def _ssh_connect(self, keys: _HostKeys, ciphers: Sequence[bytes] = ()) -> asyncssh.SSHClientConnection:
        """``ciphers``: the encryption algorithms in the order asked for (empty: asyncssh's, or ~/.ssh/config's)."""
        cfg = self._config
        # ignore_encrypted: a passphrase-protected IdentityFile is used through ssh-agent, if at all.
        return await asyncssh.connect(
            cfg.address, port=cfg.port or (), username=cfg.user or (), ignore_encrypted=True,
            encryption_algs=[c.decode("ascii") for c in ciphers] or (),
            known_hosts=keys.match, client_factory=lambda: _Client(keys, self._dropped),
            connect_timeout=self._connect_timeout, keepalive_interval=self._keepalive)

    def _known_hosts_files(self, options: asyncssh.SSHClientConnectionOptions) -> list[str]:
        """The config's known_hosts, else ~/.ssh/config's UserKnownHostsFile, else ~/.ssh/known_hosts."""
        if self._config.known_hosts:
            files = [str(self._config.known_hosts)]
        else:
            files = list(options.known_hosts) if isinstance(options.known_hosts, list) else []
        return [str(Path(f).expanduser()) for f in files or [DEFAULT_KNOWN_HOSTS]]

    def _connect_error(self, exc: BaseException, keys: _HostKeys,
                       options: asyncssh.SSHClientConnectionOptions) -> HostError:
        where = self.target
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            return keys.refusal(self.name, where, exc)
        if isinstance(exc, asyncssh.PermissionDenied):
            return HostError(f"{self.name}: {where} refused every key offered (ssh-agent, IdentityFile "
                             f"of ~/.ssh/config, ~/.ssh/id_*); check the user and the authorized keys")
        if isinstance(exc, socket.gaierror):
            return self._unresolved(exc, options)
        if isinstance(exc, TimeoutError):
            return HostUnreachable(f"{self.name}: {where} did not answer within {self._connect_timeout:g}s")
        if isinstance(exc, ConnectionRefusedError):
            return HostUnreachable(f"{self.name}: {where} refused the connection (is sshd running there, "
                                   f"is the port right?)")
        if isinstance(exc, OSError):
            return HostUnreachable(f"{self.name}: cannot connect to {where}: {_one_line(exc.strerror or str(exc))}")
        if isinstance(exc, asyncssh.ConnectionLost):
            return HostUnreachable(f"{self.name}: {where} closed the connection: {_one_line(exc.reason)}")
        if isinstance(exc, asyncssh.DisconnectError):
            return HostError(f"{self.name}: SSH with {where} failed: {_one_line(exc.reason)}")
        return HostError(f"{self.name}: cannot connect to {where}: {_one_line(str(exc))}")

    def _unresolved(self, exc: socket.gaierror, options: asyncssh.SSHClientConnectionOptions) -> HostError:
        """The name that did not resolve, and where to mend it.

        That name is what ~/.ssh/config maps the address to (its HostName), or the
        ProxyJump host (the jump host resolves the host itself). A name that resolved
        before (the host was reached) has not gone from the config: that is DNS
        trouble which may pass, so it is only unreachable.
        """
        address = self._config.address
        if isinstance(options.tunnel, str) and options.tunnel:
            name, mend = options.tunnel, f"check ProxyJump of {address!r} in ~/.ssh/config"
        elif options.host != address:
            name, mend = options.host, f"check HostName of {address!r} in ~/.ssh/config"
        else:
            name, mend = address, "check address: in the config"
        why = "" if exc.errno == socket.EAI_NONAME else f": {_one_line(exc.strerror or str(exc))}"
        kind = HostUnreachable if self._ever_connected else HostNotFound
        return kind(f"{self.name}: cannot resolve host name {name!r}{why} ({mend})")

    def _dropped(self, conn: asyncssh.SSHClientConnection, exc: Exception | None) -> None:
        """asyncssh saw the connection end; if it was ours and we did not close it, say so."""
        if conn is not self._conn:
            return
        self._conn = None
        reason = _one_line(str(exc)) if exc else "closed by the server"
        self._status("reconnecting", f"connection lost: {reason}")

    def _status(self, status: str, detail: str) -> None:
        self._on_status(self.name, status, detail)

    # --- channels ---

    def _command(self, argv: Sequence[str], watchdog: str = WATCHDOG) -> str:
        """The remote command line: ``argv`` under the watchdog, every word quoted, never pasted raw."""
        if not argv:
            raise HostError(f"{self.name}: empty command")
        if any("\0" in arg for arg in argv):
            raise HostError(f"{self.name}: an argument of {argv[0]} contains a NUL character")
        return shlex.join(["sh", "-c", watchdog, argv[0], *argv])

    async def _start(self, conn: asyncssh.SSHClientConnection, command: str,
                     argv: Sequence[str]) -> asyncssh.SSHClientProcess:
        try:
            return await conn.create_process(command, encoding=None)
        except asyncssh.ChannelOpenError as exc:
            if conn.is_closed():
                raise _disconnected(self, argv) from None
            raise HostError(f"{self.name}: sshd refused a session for {argv[0]}: {_one_line(exc.reason)}") from None
        except (asyncssh.Error, OSError):
            raise _disconnected(self, argv) from None


class SshLines:
    """The stdout lines of a remote command; after the block, its exit status and stderr tail.

    ``exit_status`` stays None when the block was left before the command ended
    (the command was stopped, not finished).
    """

    def __init__(self, host: SshHost, conn: asyncssh.SSHClientConnection,
                 process: asyncssh.SSHClientProcess, argv: Sequence[str]) -> None:
        self._host = host
        self._conn = conn
        self._process = process
        self._argv = argv
        self._stderr = asyncio.ensure_future(last_bytes(process.stderr.read, errors=(asyncssh.Error, OSError)))
        self.exit_status: int | None = None
        self.stderr = ""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return each_line(self.batches())

    async def batches(self) -> AsyncIterator[list[bytes]]:
        async for batch in line_batches(self._read):
            yield batch
        await self._process.wait_closed()
        if self._process.returncode is None:
            raise _no_exit_status(self._host, self._conn, self._argv)

    async def _read(self, size: int) -> bytes:
        try:
            return await self._process.stdout.read(size)
        except (asyncssh.Error, OSError):
            raise _disconnected(self._host, self._argv) from None

    async def finish(self) -> None:
        """Stop the command if it still runs, by closing its channel."""
        process = self._process
        if process.returncode is None:
            process.close()   # the watchdog stops the command
        else:
            self.exit_status = process.returncode
        try:
            async with asyncio.timeout(CLOSE_WAIT):
                await process.wait_closed()
        except TimeoutError:
            return   # no confirmation from the server: the stderr reader ends with the connection
        self.stderr = (await self._stderr).decode(errors="replace").strip()


class _HostKeys:
    """Looks the host up in known_hosts, and remembers what it offered to explain a refusal.

    Asyncssh asks :meth:`match` for the trusted keys, then :meth:`validate` about an
    offered key that is not among them.
    """

    def __init__(self, files: list[str], accept_new: bool, note: Callable[[str], None]) -> None:
        self.files = files
        self.accept_new = accept_new
        self.note = note
        text = "\n".join(_read(f) for f in files)
        self.known_hosts = asyncssh.import_known_hosts(text)
        # The revocations again, as if trusted: looked up at the port and without it, every one is found.
        self.revocations = asyncssh.import_known_hosts("\n".join(
            line.strip().split(None, 1)[1] for line in text.splitlines() if line.strip().startswith("@revoked ")))
        self.known: Sequence[asyncssh.SSHKey] = ()
        self.revoked: Sequence[asyncssh.SSHKey] = ()
        self.offered: asyncssh.SSHKey | None = None
        self.unrecorded = ""       # why --accept-new did not record (and so did not trust) the key offered

    def match(self, host: str, addr: str, port: int | None) -> Any:
        """The keys known_hosts trusts for the host, and every key it revokes for it, with or without the port.

        asyncssh looks the host up again without its port when nothing is trusted at the port, and keeps only the
        second lookup's revocations: a key revoked as ``@revoked [host]:port`` would be dropped, and ``--accept-new``
        would trust exactly the key the admin said never to."""
        result: list[Any] = list(self.known_hosts.match(host, addr, port))
        revoked = [*result[2], *self.revocations.match(host, addr, port)[0], *self.revocations.match(host, addr, None)[0]]
        self.known = result[0]
        self.revoked = result[2] = list(dict.fromkeys(revoked))
        return tuple(result)

    def validate(self, host: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.offered = key
        if self.known or not self.accept_new or key in self.revoked:
            return False
        return self._append(host, port, key)

    def _append(self, host: str, port: int, key: asyncssh.SSHKey) -> bool:
        """Trust on first use: record the key where OpenSSH would, in the first known_hosts file; only in a file
        (and through a link) of the caller's, or not at all (False): run with another user's HOME (``sudo``
        keeping it), pdtui would otherwise append as root to wherever that user's link leads."""
        path = Path(self.files[0])
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        pattern = host if port == 22 else f"[{host}]:{port}"
        existing = _read(str(path))
        separator = "\n" if existing and not existing.endswith("\n") else ""
        target = path
        if path.is_symlink():
            if (owner := path.lstat().st_uid) != os.geteuid():
                self.unrecorded = f"{path} is a link of another user's (uid {owner})"
                return False
            target = Path(os.path.realpath(path))     # followed once, here; the file itself never through a link
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "a") as out:
            if (owner := os.fstat(fd).st_uid) != os.geteuid():
                self.unrecorded = f"{path} is another user's file (uid {owner})"
                return False
            out.write(f"{separator}{pattern} {' '.join(key.export_public_key().decode().split()[:2])}\n")
        self.note(f"trusted the new host key {key.get_fingerprint('sha256')} (added to {path})")
        return True

    def refusal(self, name: str, where: str, exc: asyncssh.HostKeyNotVerifiable) -> HostError:
        if self.offered is None:
            return HostError(f"{name}: host key of {where} not trusted: {_one_line(exc.reason)}")
        fingerprint = self.offered.get_fingerprint("sha256")
        if self.offered in self.revoked:
            return HostError(f"{name}: host key of {where} ({fingerprint}) is revoked in known_hosts; refusing to connect")
        if self.known:
            return HostKeyChanged(
                f"{name}: HOST KEY CHANGED for {where}: it now offers {fingerprint}, not the key in "
                f"{self.files[0]}; refusing to connect (a man in the middle, or a reinstalled host: "
                f"then remove the old key with ssh-keygen -R)")
        if self.unrecorded:
            return HostKeyUnknown(f"{name}: unknown host key for {where} ({fingerprint}) not trusted: "
                                  f"{inert(self.unrecorded)}; record it with ssh-keyscan in a known_hosts of yours")
        return HostKeyUnknown(f"{name}: unknown host key for {where} ({fingerprint}); check it, "
                              f"then re-run with --accept-new to trust it")


class _Client(asyncssh.SSHClient):
    """Routes asyncssh's host key question and connection end to the host."""

    def __init__(self, keys: _HostKeys,
                 dropped: Callable[[asyncssh.SSHClientConnection, Exception | None], None]) -> None:
        self._keys = keys
        self._dropped = dropped
        self._conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._dropped(self._conn, exc)

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self._keys.validate(host, port, key)


def _disconnected(host: SshHost, argv: Sequence[str]) -> HostDisconnected:
    return HostDisconnected(f"{host.name}: connection to {host.target} lost while running {argv[0]}; "
                            f"it may or may not have completed")


def _no_exit_status(host: SshHost, conn: asyncssh.SSHClientConnection, argv: Sequence[str]) -> HostError:
    """A channel closed without an exit status: the connection went, or the server gave up on it."""
    if conn.is_closed():
        return _disconnected(host, argv)
    return HostError(f"{host.name}: {argv[0]} ended without an exit status")


def _resolver_busy(exc: BaseException) -> bool:
    """The resolver could not answer (EAI_AGAIN): worth asking again, quickly and twice at most.

    EAI_AGAIN means no answer came (a lost UDP packet, a resolver timing out or
    restarting): the same question a moment later usually gets one. A resolver that
    still cannot answer after RESOLVE_AGAIN leaves this machine without DNS, which
    minutes of retries would rarely mend and which would hide a typo as long: the
    name is then not found, as for EAI_NONAME.
    """
    return isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_AGAIN


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        return ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _aead_first(algorithms: Sequence[bytes]) -> list[bytes]:
    """asyncssh's encryption algorithms with AES-GCM moved first, the rest in its order."""
    return sorted(algorithms, key=lambda name: not name.decode("ascii").endswith(AEAD_FIRST))
