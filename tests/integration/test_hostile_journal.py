"""Hostile journal lines (tests/hostile/journal/lines.bin, the bytes a remote program prints) through every face that
shows a journal: the headless lines, the JSON events and the TUI's panel. Each line is shown, and shown inert."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pdtui.engine.events import LineKind, LogLines, LogRecord
from pdtui.sim.scripted import T0, starting_script
from tests.hostile import CORPUS, acting, confined, written
from tests.ui.ui_fakes import make_app

LINES = (CORPUS / "journal" / "lines.bin").read_bytes().splitlines()
END = "HOSTILE-END"


def _config(sandbox, path: Path) -> None:
    program = (f"import sys, time; sys.stdout.buffer.write(open({str(CORPUS / 'journal' / 'lines.bin')!r}, 'rb').read()"
               f" + b'{END}\\n'); sys.stdout.flush(); time.sleep(120)")
    unit = sandbox.add_unit("t-noisy", [sys.executable, "-c", program])
    config = {"name": "hostile-journal", "hosts": {"sim": {"local": True, "commands": sandbox.commands}},
              "services": {"noisy": {"host": "sim", "unit": unit, "role": "other", "ready": {"log": END},
                                     "timeout": "50s"}}}
    path.write_text(yaml.safe_dump(config))


@pytest.mark.parametrize("face", [["--headless", "--logs"], ["--json", "--logs"]], ids=["lines", "json"])
def test_every_hostile_line_is_printed_inert_by_the_headless_faces(sandbox, tmp_path, face):
    config = tmp_path / "hostile.yaml"
    _config(sandbox, config)
    env, work = confined(tmp_path / "run")
    done = subprocess.run([sys.executable, "-m", "pdtui", "up", str(config), *face], capture_output=True, timeout=90,
                          env=env, cwd=work)
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert done.returncode == 0, err
    assert acting(out) == [] and acting(err) == []
    assert written(tmp_path / "run") == []
    if face[0] == "--json":
        shown = [r["text"] for line in out.splitlines() for r in json.loads(line).get("lines", [])]
    else:
        shown = [line.split(" | ", 1)[1] for line in out.splitlines() if line.lstrip().startswith("noisy | ")]
    assert len(shown) == len(LINES) + 1 and shown[-1] == END       # every line, once, none split by what it holds


async def test_every_hostile_line_is_drawn_inert_in_the_tui():
    records = tuple(LogRecord(line.decode(errors="replace"), LineKind.NORMAL, T0 + 20 + i)
                    for i, line in enumerate(LINES))
    app, _ = make_app([*starting_script()[:-1], LogLines("prefill", records, 40.0)])
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause()
        view = app.deployment.panels["prefill"].log_view
        strips = [view.render_line(y) for y in range(view.scrollable_content_region.height)]
        drawn = "\n".join(strip.text for strip in strips)
        segments = [segment for strip in strips for segment in strip]
        assert "OSC 52 clipboard write" in drawn and "[bold red]markup[/]" in drawn
        assert acting(drawn) == []
        assert all(segment.control is None for segment in segments)
        assert all(segment.style is None or not segment.style.link for segment in segments)


def test_a_secret_pdtui_was_never_told_is_masked_where_a_hand_written_units_server_prints_it(sandbox, tmp_path):
    program = ("import time; print(\"server_args=ServerArgs(model_path='m', api_key='sk-handWritten42', "
               "admin_api_key=None)\", flush=True); print('HOSTILE-END', flush=True); time.sleep(120)")
    unit = sandbox.add_unit("t-hand", [sys.executable, "-c", program])
    config = tmp_path / "hand.yaml"
    config.write_text(yaml.safe_dump({
        "name": "hand-written", "hosts": {"sim": {"local": True, "commands": sandbox.commands}},
        "services": {"hand": {"host": "sim", "unit": unit, "role": "other", "ready": {"log": END}, "timeout": "50s"}}}))
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "pdtui", "up", str(config), "--json", "--logs"], capture_output=True,
                          timeout=90, env=env)
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    history = (tmp_path / "state" / "pdtui" / "history.sqlite3").read_bytes()
    assert "api_key='<secret>'" in out and "sk-handWritten42" not in out and b"sk-handWritten42" not in history


def test_a_history_that_cannot_be_written_is_told_inert(sandbox, tmp_path):
    config = tmp_path / "hostile.yaml"
    _config(sandbox, config)
    state = tmp_path / "state\x1b]0;title\x07"
    state.mkdir()
    (state / "pdtui").write_text("a file where the history's folder goes\n")
    done = subprocess.run([sys.executable, "-m", "pdtui", "up", str(config), "--headless"], capture_output=True,
                          timeout=90, env={**os.environ, "XDG_STATE_HOME": str(state)})
    err = done.stderr.decode()
    assert done.returncode == 0 and "the run history could not be written" in err, err
    assert acting(err) == [] and "state\u241b]0;title\u2407" in err
