"""A config found, not named, is used only when nobody but the caller and root could have put it there."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest

from pdtui.config.trust import distrust

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of the caller's, 0755, holding a config."""
    here = tmp_path / "deploy"
    here.mkdir(mode=0o755)
    (here / "pdtui.yaml").write_text("name: x\n")
    return here


def test_the_callers_own_config_in_the_callers_own_folder_is_used(folder: Path) -> None:
    assert distrust(folder / "pdtui.yaml") is None


def test_a_missing_config_is_left_for_loading_to_tell(folder: Path) -> None:
    assert distrust(folder / "gone.yaml") is None


@needs_root
def test_a_config_another_user_owns_is_not_used_saying_whose_it_is(folder: Path) -> None:
    os.chown(folder / "pdtui.yaml", NOBODY, NOBODY)
    name = pwd.getpwuid(NOBODY).pw_name
    assert distrust(folder / "pdtui.yaml") == f"it is owned by uid {NOBODY} ({name}), not by you or root (mode 0644)"


@needs_root
def test_a_config_in_a_folder_another_user_owns_is_not_used(folder: Path) -> None:
    os.chown(folder, NOBODY, NOBODY)
    assert distrust(folder / "pdtui.yaml") == (f"its folder {folder} is owned by uid {NOBODY} "
                                                f"({pwd.getpwuid(NOBODY).pw_name}), not by you or root (mode 0755)")


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o757], ids=["world", "sticky", "others"])
def test_a_config_in_a_folder_others_can_write_is_not_used_sticky_or_not(folder: Path, mode: int) -> None:
    folder.chmod(mode)
    assert f"its folder {folder} can be written by others (mode {mode:04o}" in (distrust(folder / "pdtui.yaml") or "")


def test_a_config_others_can_write_is_not_used(folder: Path) -> None:
    (folder / "pdtui.yaml").chmod(0o646)
    assert (distrust(folder / "pdtui.yaml") or "").startswith("it can be written by others (mode 0646")


@needs_root
def test_a_folder_a_shared_group_can_write_is_not_used(folder: Path) -> None:
    os.chown(folder, 0, NOBODY if NOBODY != os.getegid() else 1)
    folder.chmod(0o775)
    assert "can be written by others (mode 0775, group" in (distrust(folder / "pdtui.yaml") or "")


def test_a_folder_only_the_callers_private_group_can_write_is_used(folder: Path) -> None:
    user = pwd.getpwuid(os.geteuid())
    if grp.getgrgid(user.pw_gid).gr_name != user.pw_name or set(grp.getgrgid(user.pw_gid).gr_mem) - {user.pw_name}:
        pytest.skip("the caller has no private group here")
    os.chown(folder, os.geteuid(), user.pw_gid)
    folder.chmod(0o775)
    assert distrust(folder / "pdtui.yaml") is None


def test_a_symlink_is_followed_to_where_it_leads(tmp_path: Path, folder: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "real.yaml").write_text("name: x\n")
    shared.chmod(0o777)
    (folder / "pdtui.yaml").unlink()
    (folder / "pdtui.yaml").symlink_to(shared / "real.yaml")
    assert (distrust(folder / "pdtui.yaml") or "").startswith(
        f"it leads to {shared / 'real.yaml'}, whose folder {shared} can be written by others")


def test_a_symlink_to_a_safe_file_is_used(tmp_path: Path, folder: Path) -> None:
    (folder / "pdtui.yaml").rename(tmp_path / "real.yaml")
    (folder / "pdtui.yaml").symlink_to("../real.yaml")
    assert distrust(folder / "pdtui.yaml") is None


@needs_root
def test_a_symlink_another_user_planted_is_not_used(tmp_path: Path, folder: Path) -> None:
    (folder / "pdtui.yaml").rename(tmp_path / "real.yaml")
    (folder / "pdtui.yaml").symlink_to(tmp_path / "real.yaml")
    os.lchown(folder / "pdtui.yaml", NOBODY, NOBODY)
    assert (distrust(folder / "pdtui.yaml") or "").startswith(f"it is owned by uid {NOBODY}")


def test_a_loop_of_symlinks_is_not_used(folder: Path) -> None:
    (folder / "pdtui.yaml").unlink()
    (folder / "pdtui.yaml").symlink_to("other.yaml")
    (folder / "other.yaml").symlink_to("pdtui.yaml")
    assert distrust(folder / "pdtui.yaml") == "it is a chain of more than 40 symlinks"
