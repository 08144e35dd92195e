"""Ports chosen at run time: never the same one twice, across processes, and never one the kernel picks itself."""

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_a_symlink_planted_at_the_counters_name_is_never_followed(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "COUNTER_DIR", tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("root's own file")
    (tmp_path / f"pdtui-{os.getuid()}").mkdir(mode=0o700)
    (tmp_path / f"pdtui-{os.getuid()}" / "ports").symlink_to(victim)
    with pytest.raises(OSError):
        free_port()
    assert victim.read_text() == "root's own file"


def test_a_folder_planted_by_another_user_is_refused_and_left_unwritten(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "COUNTER_DIR", tmp_path)
    planted = tmp_path / f"pdtui-{os.getuid()}"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    with pytest.raises(OSError, match="not a private folder"):
        free_port()
    assert list(planted.iterdir()) == []


def test_a_symlink_planted_at_the_folders_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "COUNTER_DIR", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / f"pdtui-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(OSError, match="not a folder"):
        free_port()
    assert list(elsewhere.iterdir()) == []


def test_the_counter_is_kept_private(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "COUNTER_DIR", tmp_path)
    free_port()
    folder = tmp_path / f"pdtui-{os.getuid()}"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "ports").stat().st_mode) == 0o600


def test_a_lock_held_by_another_process_is_waited_for_only_so_long(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "COUNTER_DIR", tmp_path)
    monkeypatch.setattr(ports, "LOCK_WAIT", 0.05)
    free_port()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / f"pdtui-{os.getuid()}" / "ports")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(OSError, match="stayed locked"):
            free_port()
    finally:
        holder.kill()
        holder.wait()


HOLD = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); " \
       "print('held', flush=True); time.sleep(60)"
