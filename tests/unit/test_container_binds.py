"""What the real-systemd container must be given beside the machine's root (pdtui/sim/systemd_host.py)."""

from pathlib import Path

from pdtui.sim.systemd_host import unshared


def test_paths_on_another_file_system_than_the_root_are_bound_and_the_roots_are_not():
    devices = {"/": 1, "/usr": 1, "/opt/venv": 2, "/work/checkout": 3}
    got = unshared(["/opt/venv", "/usr", "/work/checkout", "/opt/venv"], device=devices.get)
    assert got == {"/opt/venv": Path("/opt/venv"), "/work/checkout": Path("/work/checkout")}


def test_a_path_that_is_not_there_is_not_bound():
    assert unshared(["/no/such/venv"], device={"/": 1}.get) == {}


def test_a_path_in_a_folder_the_container_mounts_afresh_is_bound_though_on_the_root():
    """A venv made in /tmp: the container's /tmp is a tmpfs of its own."""
    devices = {"/": 1, "/tmp/venv": 1, "/tmpfoo": 1}
    assert unshared(["/tmp/venv", "/tmpfoo"], device=devices.get) == {"/tmp/venv": Path("/tmp/venv")}
