"""What the real-systemd container must be given beside the machine's root (pdtui/sim/systemd_host.py)."""

import json
import sys
from pathlib import Path

import pytest

from pdtui.sim import systemd_host
from pdtui.sim.systemd_host import editable_checkout, interpreter_binds, interpreter_paths, unshared


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


def test_a_path_inside_another_bound_is_left_to_the_outer_bind():
    """A venv's python is a link to its base interpreter: bound on its own, the link would become the file."""
    devices = {"/": 1, "/tmp/v": 1, "/tmp/v/bin/python": 1, "/tmp/vx": 1}
    got = unshared(["/tmp/v/bin/python", "/tmp/v", "/tmp/vx"], device=devices.get)
    assert got == {"/tmp/v": Path("/tmp/v"), "/tmp/vx": Path("/tmp/vx")}


@pytest.fixture
def venv_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """This process seen as a venv's python that links to a base interpreter, pdtui installed editable from a
    checkout: the paths a venv made by ``python -m venv`` and ``pip install -e`` give."""
    root = tmp_path.resolve()
    paths = {"base": root / "base", "venv": root / "venv", "checkout": root / "checkout"}
    paths["real"] = paths["base"] / "bin" / "python3.11"
    paths["python"] = paths["venv"] / "bin" / "python"
    for executable in (paths["real"], paths["python"]):
        executable.parent.mkdir(parents=True)
    paths["real"].touch()
    paths["python"].symlink_to(paths["real"])
    monkeypatch.setattr(sys, "executable", str(paths["python"]))
    monkeypatch.setattr(sys, "prefix", str(paths["venv"]))
    monkeypatch.setattr(sys, "base_prefix", str(paths["base"]))
    record = json.dumps({"url": paths["checkout"].as_uri(), "dir_info": {"editable": True}})
    monkeypatch.setattr(systemd_host, "_direct_url", lambda: record)
    return paths


def test_the_interpreter_is_named_as_run_and_as_resolved_with_its_venv_base_and_editable_checkout(venv_interpreter):
    p = venv_interpreter
    assert interpreter_paths() == [str(p["python"]), str(p["real"]), str(p["venv"]), str(p["base"]),
                                   str(systemd_host.SOURCE), str(p["checkout"])]


def test_what_the_container_cannot_see_of_the_interpreter_is_bound_once_each(venv_interpreter, monkeypatch):
    p = venv_interpreter
    devices = {"/": 1, str(systemd_host.SOURCE): 1, **{str(path): 2 for path in p.values()}}
    monkeypatch.setattr(systemd_host, "_device", devices.get)
    own = {str(systemd_host.SOURCE): systemd_host.SOURCE} if systemd_host._in_its_own(str(systemd_host.SOURCE)) else {}
    assert interpreter_binds() == {**{str(p[name]): p[name] for name in ("venv", "base", "checkout")}, **own}


def test_an_editable_install_names_its_checkout():
    record = {"url": "file:///work/my%20checkout", "dir_info": {"editable": True}}
    assert editable_checkout(json.dumps(record)) == "/work/my checkout"


@pytest.mark.parametrize("record", [
    None,
    "not json",
    json.dumps(["file:///work/checkout"]),
    json.dumps({"url": "file:///work/checkout", "dir_info": {}}),                 # installed from the folder, copied
    json.dumps({"url": "https://example.org/pdtui.tar.gz", "archive_info": {}}),
    json.dumps({"url": "git+https://example.org/pdtui", "dir_info": {"editable": True}}),
])
def test_any_other_install_names_no_checkout(record):
    assert editable_checkout(record) is None
