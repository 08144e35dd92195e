"""Ports chosen at run time: never the same one twice, across processes, and never one the kernel picks itself."""

import socket
import subprocess
import sys
from pathlib import Path

from pdtui.sim import ports
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
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"}     # a folder of their own: the counter is shared still
    children = [subprocess.Popen([sys.executable, "-c", ASK], stdout=subprocess.PIPE, env=env, text=True)
                for _ in range(4)]
    mine = [free_port() for _ in range(200)]
    given = [int(p) for child in children for p in child.communicate(timeout=60)[0].split()] + mine
    assert len(given) == 1000
    assert len(set(given)) == len(given)


def test_a_port_somebody_listens_on_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "COUNTER_DIR", tmp_path)
    first = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first + 1))
        taken.listen()
        assert free_port() == first + 2
