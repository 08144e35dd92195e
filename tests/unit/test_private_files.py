"""The history database and saved logs are their owner's alone: folders 0700, files 0600, never written through a
link or over a file already there."""

from __future__ import annotations

import os
import stat

import pytest

from pdtui.faces.run_history import HistoryError, connect
from pdtui.support.private_files import create_private, private_file, private_folder


def mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_history_database_is_made_0600_in_a_0700_folder(tmp_path):
    path = tmp_path / "state" / "pdtui" / "history.sqlite3"
    connect(path, create=True).close()
    assert mode(path.parent) == 0o700 and mode(path) == 0o600


def test_an_existing_history_and_its_folder_are_narrowed(tmp_path):
    folder = tmp_path / "pdtui"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    (folder / "history.sqlite3").touch(mode=0o644)
    (folder / "history.sqlite3").chmod(0o644)
    connect(folder / "history.sqlite3", create=True).close()
    assert mode(folder) == 0o700 and mode(folder / "history.sqlite3") == 0o600


def test_a_saved_log_is_created_0600_and_never_through_a_link_or_over_a_file(tmp_path):
    create_private(tmp_path / "a.log", "line\n")
    assert mode(tmp_path / "a.log") == 0o600 and (tmp_path / "a.log").read_text() == "line\n"
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    (tmp_path / "b.log").symlink_to(victim)
    for taken in ("a.log", "b.log"):
        with pytest.raises(FileExistsError):
            create_private(tmp_path / taken, "other\n")
    assert victim.read_text() == "mine\n" and (tmp_path / "a.log").read_text() == "line\n"


def test_private_helpers_make_what_is_missing(tmp_path):
    assert mode(private_folder(tmp_path / "x" / "y")) == 0o700
    assert mode(private_file(tmp_path / "x" / "y" / "f")) == 0o600


def test_a_history_planted_as_a_link_is_refused_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("")
    victim.chmod(0o644)
    folder = tmp_path / "pdtui"
    folder.mkdir(mode=0o700)
    (folder / "history.sqlite3").symlink_to(victim)
    with pytest.raises(HistoryError, match="symbolic link"):
        connect(folder / "history.sqlite3", create=True)
    assert mode(victim) == 0o644 and victim.read_bytes() == b""


def test_a_state_folder_planted_as_a_link_is_refused_and_its_target_left_alone(tmp_path):
    target = tmp_path / "etc"
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pdtui").symlink_to(target)
    with pytest.raises(HistoryError, match="symbolic link"):
        connect(tmp_path / "state" / "pdtui" / "history.sqlite3", create=True)
    assert mode(target) == 0o755 and not list(target.iterdir())


def test_a_folder_or_file_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = private_folder(tmp_path / "pdtui")
    private_file(folder / "f")
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)     # as if another user made them
    for made in (lambda: private_folder(folder), lambda: private_file(folder / "f")):
        with pytest.raises(PermissionError, match="another user"):
            made()
