"""Unusable config files through the command line: one line on stderr, exit 2, no traceback.

tests/unit/test_config.py covers the loader (83 broken configs with their exact
line:col, empty, binary, directory, missing); this checks what the user sees
from ``pdtui check`` and ``pdtui up`` for the files that are not YAML at all.
"""

from __future__ import annotations

import pytest

from pdtui.cli import main

CASES = {
    "empty": b"",
    "binary": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe",
    "not-utf8": b"name: x\nhosts: {}\nservices: {\xff}\n",
    "did-you-mean": b"name: x\nhosts:\n  gpu0:\n    adress: 10.0.0.1\nservices: {}\n",
}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["check", "up"])
@pytest.mark.parametrize("content", CASES.values(), ids=CASES.keys())
def test_unusable_file_is_one_positioned_line_and_exit_2(tmp_path, capsys, command, content):
    path = tmp_path / "deploy.yaml"
    path.write_bytes(content)
    code, out, err = run(capsys, command, str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"{path}:") and err.count("\n") == 1 and "Traceback" not in err


def test_typo_suggests_the_key(tmp_path, capsys):
    path = tmp_path / "deploy.yaml"
    path.write_bytes(CASES["did-you-mean"])
    _, _, err = run(capsys, "check", str(path))
    assert "did you mean 'address'" in err


@pytest.mark.parametrize("command", ["check", "up"])
@pytest.mark.parametrize("kind", ["directory", "missing"])
def test_directory_or_missing_file_is_one_line_and_exit_2(tmp_path, capsys, command, kind):
    path = tmp_path / "deploy.yaml"
    if kind == "directory":
        path.mkdir()
    code, out, err = run(capsys, command, str(path))
    assert code == 2 and err.count("\n") == 1 and str(path) in err and "Traceback" not in err
