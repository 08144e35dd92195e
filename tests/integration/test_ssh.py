"""The SSH host over a real sshd on 127.0.0.1 (asyncssh's server where sshd is absent)."""

from __future__ import annotations

import asyncio
import getpass
import socket
import time
import uuid
from pathlib import Path

import asyncssh
import pytest

from pdtui.hosts import ssh
from pdtui.hosts.base import (
    Host,
    HostDisconnected,
    HostError,
    HostKeyChanged,
    HostKeyUnknown,
    HostNotFound,
    HostUnreachable,
)
from pdtui.sim.sshd import public_line
from tests.sshd import free_port, trust, write_command


class Statuses(list):
    """Collects on_status calls; ``wait_for`` blocks until a matching one arrives."""

    def __init__(self) -> None:
        super().__init__()
        self._waiters: list = []

    def __call__(self, name: str, status: str, detail: str) -> None:
        self.append((name, status, detail))
        for match, event in self._waiters:
            if match(status, detail):
                event.set()

    async def wait_for(self, match) -> None:
        event = asyncio.Event()
        self._waiters.append((match, event))
        if any(match(status, detail) for _, status, detail in self):
            return
        await asyncio.wait_for(event.wait(), 30)

    def names(self) -> list[str]:
        return [status for _, status, _ in self]


def running(marker: str) -> list[int]:
    """PIDs whose command line contains ``marker``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def wait_until_gone(marker: str) -> list[int]:
    """The processes still running with ``marker`` after up to 10 s (empty when they exited)."""
    deadline = time.monotonic() + 10
    while (left := running(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


async def wait_for_file(path: Path) -> None:
    for _ in range(1000):
        if path.exists():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# --- commands ---


async def test_run_reports_exit_status_stdout_and_stderr(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    host = make_host(sshd.port)
    assert isinstance(host, Host)
    result = await host.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")


async def test_reads_asked_at_once_share_one_session_and_each_gets_its_own_result(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    host = make_host(sshd.port)
    reads = [["sh", "-c", f"echo $PPID; echo err{i} >&2; exit {i}"] for i in range(4)]
    shared = await asyncio.gather(*(host.run(argv, read_only=True) for argv in reads))
    assert [(r.argv, r.exit_status, r.stderr) for r in shared] == [(tuple(a), i, f"err{i}\n") for i, a in enumerate(reads)]
    assert len({r.stdout for r in shared}) == 1, "one shell ran them all"
    apart = await asyncio.gather(*(host.run(argv) for argv in reads))
    assert len({r.stdout for r in apart}) == 4, "what is not a read has a session of its own"


async def test_commands_find_stand_ins_on_the_session_path(sshd, sshd_factory, ssh_home, make_host):
    trust(ssh_home, sshd)
    write_command(sshd_factory, "systemctl", "print('stand-in', sys.argv[1:])")
    result = await make_host(sshd.port).run(["systemctl", "is-active", "x.service"])
    assert result.stdout == "stand-in ['is-active', 'x.service']\n"


async def test_run_timeout_is_one_line_and_stops_the_remote_command(sshd, sshd_factory, ssh_home, make_host):
    trust(ssh_home, sshd)
    name = unique("hang")
    write_command(sshd_factory, name, "time.sleep(300)")
    host = make_host(sshd.port)
    with pytest.raises(HostError, match=rf"^gpu0: {name} did not finish within 0.5s$"):
        await host.run([name], timeout=0.5)
    assert wait_until_gone(name) == []


async def test_stream_yields_lines_and_leaving_stops_the_remote_command(sshd, sshd_factory, ssh_home, make_host):
    trust(ssh_home, sshd)
    name = unique("follow")
    write_command(sshd_factory, name, "print('one', flush=True); print('two', flush=True); time.sleep(300)")
    host = make_host(sshd.port)
    got = []
    async with host.stream([name]) as lines:
        async for line in lines:
            got.append(line)
            if len(got) == 2:
                break
        assert running(name)
    assert got == [b"one", b"two"]
    assert lines.exit_status is None      # stopped, not finished
    assert wait_until_gone(name) == []


async def test_stream_ends_with_the_command_and_keeps_its_status(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    host = make_host(sshd.port)
    async with host.stream(["sh", "-c", "printf 'a\\nb\\nno newline'; echo oops >&2; exit 4"]) as lines:
        got = [line async for line in lines]
    assert got == [b"a", b"b", b"no newline"]
    assert (lines.exit_status, lines.stderr) == (4, "oops")


# --- TCP through the connection ---


async def echo_server() -> asyncio.Server:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    return await asyncio.start_server(echo, "127.0.0.1", 0)


async def test_open_tcp_reaches_a_loopback_port_on_the_host(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    server = await echo_server()
    try:
        reader, writer = await make_host(sshd.port).open_tcp(server.sockets[0].getsockname()[1], timeout=5)
        writer.write(b"hello through the tunnel\n")
        await writer.drain()
        assert await reader.read(100) == b"hello through the tunnel\n"
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_open_tcp_to_a_closed_port_is_refused(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    with pytest.raises(ConnectionRefusedError):
        await make_host(sshd.port).open_tcp(free_port(), timeout=5)


# --- one connection ---


async def test_concurrent_runs_streams_and_tcp_share_one_connection(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    statuses = Statuses()
    host = make_host(sshd.port, on_status=statuses)
    server = await echo_server()
    port = server.sockets[0].getsockname()[1]

    async def stream(i: int) -> list[bytes]:
        async with host.stream(["sh", "-c", f"echo {i}; sleep 0.2; echo {i}"]) as lines:
            return [line async for line in lines]

    async def tcp(i: int) -> bytes:
        reader, writer = await host.open_tcp(port, timeout=5)
        writer.write(b"%d\n" % i)
        answer = await reader.read(100)
        writer.close()
        return answer

    try:   # 12 runs + 3 streams: more sessions than sshd's MaxSessions (10) at once
        runs, streams, tcps = await asyncio.gather(
            asyncio.gather(*(host.run(["sh", "-c", f"sleep 0.2; echo {i}"]) for i in range(12))),
            asyncio.gather(*(stream(i) for i in range(3))),
            asyncio.gather(*(tcp(i) for i in range(3))))
    finally:
        server.close()
        await server.wait_closed()
    assert [r.stdout for r in runs] == [f"{i}\n" for i in range(12)]
    assert streams == [[b"%d" % i] * 2 for i in range(3)]
    assert tcps == [b"%d\n" % i for i in range(3)]
    assert sshd.accepted_connections() == 1
    assert statuses.names() == ["connecting", "connected"]


# --- dropped connections ---


async def test_drop_fails_the_stream_and_the_next_run_reconnects(sshd, sshd_factory, ssh_home, make_host, forwarder):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    statuses = Statuses()
    host = make_host(relay.port, on_status=statuses)
    name = unique("tail")
    write_command(sshd_factory, name, "print('first', flush=True); time.sleep(300)")
    async with host.stream([name]) as lines:
        follow = aiter(lines)
        assert await anext(follow) == b"first"
        relay.cut()
        with pytest.raises(HostDisconnected, match=rf"^gpu0: connection to 127.0.0.1:{relay.port} lost"):
            await anext(follow)
    assert wait_until_gone(name) == []      # sshd closed its stdin: the watchdog stopped it
    result = await host.run(["echo", "back"])
    assert result.stdout == "back\n"
    assert statuses.names()[:2] == ["connecting", "connected"]
    assert statuses.names()[2:][-2:] == ["reconnecting", "connected"]
    assert relay.accepted == 2


async def test_run_cut_by_a_drop_is_reported_and_not_retried(sshd, sshd_factory, ssh_home, make_host, forwarder):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    host = make_host(relay.port)
    runs = sshd_factory.root / "runs"
    name = unique("slow")
    write_command(sshd_factory, name, f"open({str(runs)!r}, 'a').write('ran\\n'); time.sleep(300)")
    task = asyncio.create_task(host.run([name]))
    await wait_for_file(runs)
    relay.cut()
    with pytest.raises(HostDisconnected, match="may or may not have completed"):
        await task
    assert wait_until_gone(name) == []
    assert (await host.run(["true"])).ok
    assert runs.read_text() == "ran\n"


async def test_reconnect_backs_off_until_the_host_is_back_and_says_so_once(sshd, ssh_home, make_host, forwarder,
                                                                            connect_attempts):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    statuses = Statuses()
    host = make_host(relay.port, on_status=statuses)
    await host.connect()
    relay.blocked = True
    relay.cut()
    await statuses.wait_for(lambda status, detail: detail.startswith("connection lost"))
    task = asyncio.create_task(host.run(["echo", "again"]))
    while len(connect_attempts) < 4:
        await asyncio.sleep(0.05)
    relay.blocked = False
    assert (await task).stdout == "again\n"
    after_drop = statuses[2:]
    assert [status for _, status, _ in after_drop] == ["reconnecting", "reconnecting", "unreachable", "connected"]
    told = after_drop[2][2]
    assert told.startswith("gpu0: ") and f"127.0.0.1:{relay.port}" in told
    assert told.endswith("; trying again for up to 60s")


async def test_keepalive_notices_a_silently_dead_network(sshd, sshd_factory, ssh_home, make_host, forwarder):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    host = make_host(relay.port, keepalive=0.2)
    name = unique("quiet")
    write_command(sshd_factory, name, "print('first', flush=True); time.sleep(300)")
    async with host.stream([name]) as lines:
        follow = aiter(lines)
        assert await anext(follow) == b"first"
        relay.stalled = True
        with pytest.raises(HostDisconnected):
            await asyncio.wait_for(anext(follow), 30)


async def test_a_server_that_never_answers_times_out_in_one_line(ssh_home, make_host):
    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(mute, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(HostUnreachable) as refused:
            await make_host(port, connect_timeout=0.5).connect()
    finally:
        server.close()
        await server.wait_closed()
    assert str(refused.value) == f"gpu0: 127.0.0.1:{port} did not answer within 0.5s"


# --- host keys and credentials ---


async def test_unknown_host_key_is_refused_naming_its_fingerprint(sshd, make_host):
    with pytest.raises(HostKeyUnknown) as refused:
        await make_host(sshd.port, name="gpu7").connect()
    message = str(refused.value)
    assert message.startswith("gpu7: unknown host key for 127.0.0.1:")
    assert sshd.fingerprint in message and "--accept-new" in message and "\n" not in message
    assert sshd.accepted_connections() == 0


async def test_accept_new_records_the_key_and_later_runs_need_no_flag(sshd, ssh_home, make_host):
    statuses = Statuses()
    assert (await make_host(sshd.port, accept_new=True, on_status=statuses).run(["true"])).ok
    assert ssh_home.known_hosts.read_text() == sshd.known_hosts_line()
    assert any(sshd.fingerprint in detail for _, status, detail in statuses if status == "connecting")
    assert (await make_host(sshd.port).run(["true"])).ok


async def test_accept_new_writes_to_the_user_known_hosts_file_of_ssh_config(sshd, ssh_home, make_host):
    config = ssh_home.ssh_dir / "config"
    config.write_text("UserKnownHostsFile ~/.ssh/pdtui_known_hosts\n" + config.read_text())
    await make_host(sshd.port, accept_new=True).connect()
    assert (ssh_home.ssh_dir / "pdtui_known_hosts").read_text() == sshd.known_hosts_line()
    assert not ssh_home.known_hosts.exists()


async def test_accept_new_writes_to_the_configured_known_hosts(sshd, ssh_home, tmp_path, make_host):
    known = tmp_path / "deploy_known_hosts"
    await make_host(sshd.port, accept_new=True, config={"known_hosts": str(known)}).connect()
    assert known.read_text() == sshd.known_hosts_line()
    assert not ssh_home.known_hosts.exists()


@pytest.mark.parametrize("planted", ["link", "file"])
async def test_accept_new_never_records_through_a_link_or_in_a_file_of_another_user(sshd, tmp_path, make_host,
                                                                                  monkeypatch, planted):
    """As pdtui run by root with another user's HOME finds it: that user's link to a file of root's, or his file."""
    victim, known = tmp_path / "victim", tmp_path / "known_hosts"
    victim.write_text("root's own\n")
    if planted == "link":
        known.symlink_to(victim)
    else:
        known.write_text("")
    monkeypatch.setattr(ssh.os, "geteuid", lambda: victim.stat().st_uid + 1)    # the link and file are another's
    with pytest.raises(HostKeyUnknown, match="another user's"):
        await make_host(sshd.port, accept_new=True, config={"known_hosts": str(known)}).connect()
    assert victim.read_text() == "root's own\n" and (planted == "link" or known.read_text() == "")
    assert sshd.accepted_connections() == 0


async def test_changed_host_key_is_refused_even_with_accept_new(sshd, ssh_home, make_host):
    ssh_home.known_hosts.write_text(sshd.known_hosts_line(asyncssh.generate_private_key("ssh-ed25519")))
    before = ssh_home.known_hosts.read_text()
    with pytest.raises(HostKeyChanged, match=r"^gpu0: HOST KEY CHANGED for 127.0.0.1:\d+: it now offers SHA256:"):
        await make_host(sshd.port, accept_new=True).connect()
    assert ssh_home.known_hosts.read_text() == before


async def test_a_key_the_server_does_not_authorize_is_refused(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    ssh_home.use_key(asyncssh.generate_private_key("ssh-ed25519"))
    with pytest.raises(HostError, match=r"^gpu0: 127.0.0.1:\d+ refused every key offered") as refused:
        await make_host(sshd.port).connect()
    assert type(refused.value) is HostError


async def test_closed_port_is_one_clear_error_told_once_however_often_it_is_tried(ssh_home, make_host,
                                                                                 connect_attempts):
    statuses = Statuses()
    port = free_port()
    host = make_host(port, on_status=statuses)
    for _ in range(3):
        with pytest.raises(HostUnreachable) as refused:
            await host.run(["true"])
        assert str(refused.value) == (f"gpu0: 127.0.0.1:{port} refused the connection "
                                      "(is sshd running there, is the port right?)")
    assert len(connect_attempts) == 3
    assert statuses == [("gpu0", "connecting", f"127.0.0.1:{port}"), ("gpu0", "unreachable", str(refused.value))]


# --- names that do not resolve ---


def with_ssh_config(ssh_home, text: str) -> None:
    config = ssh_home.ssh_dir / "config"
    config.write_text(text + config.read_text())


def busy_resolver(monkeypatch, failures: int) -> list[str]:
    """asyncssh.connect fails ``failures`` times as when the resolver could not answer, then connects."""
    attempts: list[str] = []
    real = asyncssh.connect

    async def connect(host, *args, **kwargs):
        attempts.append(host)
        if len(attempts) <= failures:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return await real(host, *args, **kwargs)

    monkeypatch.setattr(asyncssh, "connect", connect)
    monkeypatch.setattr(ssh, "RESOLVE_AGAIN", (0.01, 0.01))
    return attempts


async def test_unresolvable_name_fails_once_naming_it_and_is_not_looked_up_again(ssh_home, make_host,
                                                                                 connect_attempts):
    statuses = Statuses()
    host = make_host(22, config={"address": "nohost.invalid"}, on_status=statuses)
    for _ in range(3):
        with pytest.raises(HostNotFound) as refused:
            await host.run(["true"])
        assert str(refused.value) == "gpu0: cannot resolve host name 'nohost.invalid' (check address: in the config)"
    assert connect_attempts == ["nohost.invalid"]
    assert statuses.names() == ["connecting", "error"]


@pytest.mark.parametrize("ssh_config, name, where", [
    ("Host gpubox\n    HostName nohost.invalid\n", "nohost.invalid", "HostName"),
    ("Host gpubox\n    HostName 127.0.0.1\n    ProxyJump nojump.invalid\n", "nojump.invalid", "ProxyJump"),
], ids=["HostName", "ProxyJump"])
async def test_unresolvable_name_of_an_ssh_config_alias_is_the_name_told(ssh_home, make_host, ssh_config, name, where):
    with_ssh_config(ssh_home, ssh_config)
    with pytest.raises(HostNotFound) as refused:
        await make_host(None, config={"address": "gpubox"}).connect()
    assert str(refused.value) == f"gpu0: cannot resolve host name '{name}' (check {where} of 'gpubox' in ~/.ssh/config)"


async def test_resolver_that_could_not_answer_is_asked_again_and_then_connects(sshd, ssh_home, make_host,
                                                                               monkeypatch):
    trust(ssh_home, sshd)
    attempts = busy_resolver(monkeypatch, failures=1)
    statuses = Statuses()
    assert (await make_host(sshd.port, on_status=statuses).run(["true"])).ok
    assert len(attempts) == 2
    assert statuses.names() == ["connecting", "connected"]


async def test_resolver_that_never_answers_is_asked_twice_more_then_the_name_is_not_found(ssh_home, make_host,
                                                                                       monkeypatch):
    attempts = busy_resolver(monkeypatch, failures=99)
    with pytest.raises(HostNotFound) as refused:
        await make_host(22, config={"address": "gpu0.example.com"}).connect()
    assert len(attempts) == 3
    assert str(refused.value) == ("gpu0: cannot resolve host name 'gpu0.example.com': Temporary failure in "
                                  "name resolution (check address: in the config)")


async def test_a_name_reached_before_that_stops_resolving_is_only_unreachable(sshd, ssh_home, make_host,
                                                                              forwarder, monkeypatch):
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    statuses = Statuses()
    host = make_host(relay.port, reconnect_for=0.3, on_status=statuses)
    await host.connect()

    async def no_such_name(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    real = asyncssh.connect
    monkeypatch.setattr(asyncssh, "connect", no_such_name)
    relay.cut()
    await statuses.wait_for(lambda status, detail: detail.startswith("connection lost"))
    with pytest.raises(HostUnreachable, match=r"^gpu0: cannot resolve host name '127.0.0.1'"):
        await host.run(["true"])
    monkeypatch.setattr(asyncssh, "connect", real)
    assert (await host.run(["true"])).ok


# --- ~/.ssh/config and several hosts ---


async def test_aes_gcm_is_asked_for_first_unless_ssh_config_names_its_own_ciphers(sshd, ssh_home, make_host,
                                                                                    monkeypatch):
    trust(ssh_home, sshd)
    negotiated: list[str] = []
    real = asyncssh.connect

    async def connect(*args, **kwargs):
        conn = await real(*args, **kwargs)
        negotiated.append(conn.get_extra_info("recv_cipher"))
        return conn

    monkeypatch.setattr(asyncssh, "connect", connect)
    assert (await make_host(sshd.port).run(["true"])).ok
    config = ssh_home.ssh_dir / "config"
    config.write_text("Host *\n    Ciphers chacha20-poly1305@openssh.com,aes128-ctr\n" + config.read_text())
    assert (await make_host(sshd.port, name="gpu1").run(["true"])).ok
    assert negotiated[0].endswith("-gcm@openssh.com"), negotiated
    assert negotiated[1] == "chacha20-poly1305@openssh.com", "the user's own order"


async def test_ssh_config_alias_supplies_address_port_and_user(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    config = ssh_home.ssh_dir / "config"
    config.write_text(f"Host gpubox\n    HostName 127.0.0.1\n    Port {sshd.port}\n    User {getpass.getuser()}\n"
                      + config.read_text())
    host = make_host(None, config={"address": "gpubox"})
    assert (await host.run(["true"])).ok


async def test_three_hosts_on_three_ports_each_use_one_connection(sshd_factory, ssh_home, make_host):
    servers = [sshd_factory.start() for _ in range(3)]
    for server in servers:
        trust(ssh_home, server)
    hosts = [make_host(server.port, name=f"gpu{i}") for i, server in enumerate(servers)]
    await asyncio.gather(*(host.connect() for host in hosts))
    results = await asyncio.gather(*(host.run(["echo", host.name]) for host in hosts for _ in range(2)))
    assert [r.stdout for r in results] == ["gpu0\n", "gpu0\n", "gpu1\n", "gpu1\n", "gpu2\n", "gpu2\n"]
    assert [server.accepted_connections() for server in servers] == [1, 1, 1]


@pytest.mark.parametrize("pattern", ["[127.0.0.1]:{port}", "127.0.0.1", "*"])
async def test_a_key_known_hosts_revokes_is_never_trusted_even_with_accept_new(sshd, ssh_home, make_host, pattern):
    ssh_home.known_hosts.write_text(f"@revoked {pattern.format(port=sshd.port)} {public_line(sshd.host_key)}\n")
    before = ssh_home.known_hosts.read_text()
    with pytest.raises(HostError, match="revoked"):
        await make_host(sshd.port, accept_new=True).connect()
    assert ssh_home.known_hosts.read_text() == before
    assert sshd.accepted_connections() == 0
