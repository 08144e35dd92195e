"""Ports chosen at run time: never the same one twice, across processes, and never one the kernel picks itself."""

import socket
import subprocess
import sys
from pathlib import Path

from pdtui.sim.ports import free_port

ASK = "from pdtui.sim.ports import free_port; print(*(free_port() for _ in range(200)))"


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_asked_for_in_a_row_are_all_different():
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


def test_ports_are_below_the_range_the_kernel_picks_from_for_outgoing_connections():
    assert all(port < ephemeral_low() for port in (free_port() for _ in range(50)))


def test_processes_asking_at_once_are_never_given_the_same_port(tmp_path):
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    children = [subprocess.Popen([sys.executable, "-c", ASK], stdout=subprocess.PIPE, env=env, text=True)
                for _ in range(4)]
    given = [int(p) for child in children for p in child.communicate(timeout=60)[0].split()]
    assert len(given) == 800
    assert len(set(given)) == len(given)


def test_a_port_somebody_listens_on_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    first = free_port()
    (tmp_path / next(p.name for p in tmp_path.iterdir())).write_text(str(first))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        assert free_port() == first + 1
