"""Every hostile config of tests/hostile/configs/ through ``pdtui check FILE``, as a user runs it.

Each file there begins with ``# expect: SUBSTRING``: what the one error line must say. ``@RAN@`` in a file stands for
a path in the test's own folder, which its ``commands:`` would create were they ever run. Each is refused with exit 2
and one stderr line ``FILE:LINE:COL: ...`` holding that substring, nothing on stdout, no control or other invisible
character anywhere in what pdtui printed, no traceback, and nothing changed outside the test's folder (pdtui's home,
state, cache and temporary folders are in it, so that anything written lands where it is seen).

One more is made at test time rather than kept: a config whose own file name holds terminal escapes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from pdtui.support.text import inert

CORPUS = Path(__file__).parents[1] / "hostile" / "configs"
EXPECT = re.compile(r"# expect: (.+)")
INVISIBLE = ("Cc", "Cf", "Cs", "Zl", "Zp")

ESCAPED_NAME = "config-esc\x1b]52;c;cHduZWQ=\x07\x1b[2J-file-name.yaml"
"""A file name that writes the clipboard and clears the screen, were it printed raw."""
ESCAPED_NAME_TEXT = """\
# expect: unknown key 'bogus' in the top level
name: hostile
hosts:
  me:
    local: true
    commands:
      systemctl: [sh, -c, "touch @RAN@"]
services:
  svc: {host: me, unit: whatever, role: other}
bogus: 1
"""

CASES = {path.name: path for path in sorted(CORPUS.iterdir()) if path.is_file()} | {ESCAPED_NAME: None}


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time: what a change would show in."""
    return {str(path): (path.lstat().st_size, path.lstat().st_mtime_ns) for path in root.rglob("*")}


def places(tmp_path: Path) -> dict[str, str]:
    """The environment of a run whose every place to write (home, XDG folders, temporary files) is in the test's
    folder, with no $PDTUI_CONFIG."""
    env = {k: v for k, v in os.environ.items() if k != "PDTUI_CONFIG"}
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "TMPDIR"):
        (tmp_path / name.lower()).mkdir()
        env[name] = str(tmp_path / name.lower())
    return env


def test_the_corpus_has_the_configs_of_every_kind() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("name", CASES, ids=lambda name: inert(name).replace("␛", "ESC").replace("␇", "BEL"))
def test_a_hostile_config_is_one_positioned_line_and_changes_nothing(tmp_path: Path, name: str) -> None:
    kept = CASES[name]
    text = kept.read_text(encoding="utf-8") if kept is not None else ESCAPED_NAME_TEXT
    expect = EXPECT.fullmatch(text.splitlines()[0])
    assert expect, f"{name} must begin with '# expect: SUBSTRING'"
    work, ran = tmp_path / "work", tmp_path / "ran"
    work.mkdir()
    config = work / name
    config.write_text(text.replace("@RAN@", str(ran)), encoding="utf-8")
    env = places(tmp_path)
    before, corpus = tree(tmp_path), tree(CORPUS)

    result = subprocess.run([sys.executable, "-m", "pdtui", "check", str(config)], capture_output=True, timeout=60,
                            cwd=work, env=env)

    out, err = result.stdout.decode(), result.stderr.decode()
    assert (result.returncode, out) == (2, ""), err
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    assert re.match(re.escape(inert(str(config))) + r":\d+:\d+: ", err), err
    assert expect[1] in err, err
    assert not [ch for ch in out + err.rstrip("\n") if unicodedata.category(ch) in INVISIBLE], err
    assert not ran.exists(), "its commands ran"
    assert (tree(tmp_path), tree(CORPUS)) == (before, corpus)
