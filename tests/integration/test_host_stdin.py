"""A command's stdin (``Host.run(..., input=)``): how a file's content, a secret's, reaches a command without being
a word of any argv, which ``ps`` shows every user of the machine. Each kind of host: local, SSH, the sim's memory
host."""

from __future__ import annotations

import base64

import pytest

from pdtui.config import parse_config
from pdtui.hosts.base import HostError
from pdtui.hosts.local import LocalHost
from pdtui.sim.memhost import MemoryFleet
from tests.sshd import trust

SECRET = "hf_pdtuiStdinSecret0123456789"
CONTENT = f"HF_TOKEN={SECRET}\nquote ' \" $(id) `id` \\ %\nGrüße\n".encode()
# The content back, then every process's argv as ps shows it to any user while the command runs.
READ_THEN_PS = ["sh", "-c", "cat; echo ---; ps -eo args"]


def assert_read_and_never_in_an_argv(stdout: str) -> None:
    content, _, processes = stdout.partition("---\n")
    assert content.encode() == CONTENT
    assert processes.strip() and SECRET not in processes


async def test_the_local_host_gives_the_input_on_stdin_never_in_an_argv():
    result = await LocalHost().run(READ_THEN_PS, input=CONTENT, timeout=30)
    assert result.ok, result.stderr
    assert_read_and_never_in_an_argv(result.stdout)
    assert all(SECRET not in word for word in result.argv)


async def test_without_input_a_local_command_reads_nothing():
    assert (await LocalHost().run(["cat"], timeout=30)).stdout == ""


async def test_the_ssh_host_gives_the_input_on_stdin_never_in_an_argv(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    host = make_host(sshd.port)
    encoded = base64.b64encode(CONTENT).decode()
    result = await host.run([*READ_THEN_PS[:2], READ_THEN_PS[2] + " | grep -v grep"], input=CONTENT, timeout=30)
    assert result.ok, result.stderr
    content, _, processes = result.stdout.partition("---\n")
    assert content.encode() == CONTENT
    assert processes.strip() and SECRET not in processes and encoded not in processes
    assert SECRET not in host._command(READ_THEN_PS) and encoded not in host._command(READ_THEN_PS)


async def test_an_ssh_command_with_input_is_still_stopped_at_its_timeout(sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    host = make_host(sshd.port)
    with pytest.raises(HostError, match="did not finish within 0.5s"):
        await host.run(["sh", "-c", "cat >/dev/null; sleep 300"], input=CONTENT, timeout=0.5)


async def test_the_memory_host_takes_input_as_the_others_do():
    deployment = parse_config("name: m\nhosts: {g: {address: 10.0.0.1}}\nservices:\n  s: {host: g, unit: u}\n")
    host = MemoryFleet(deployment).host(deployment.hosts["g"])
    result = await host.run(["systemctl", "show", "-p", "ActiveState", "u.service"], input=CONTENT)
    assert result.ok and host.last_input == CONTENT
