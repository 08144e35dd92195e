"""TAB completion as the shell drives it: pdtui run with argcomplete's protocol (``_ARGCOMPLETE``, ``COMP_LINE``,
``COMP_POINT``, ``_ARGCOMPLETE_IFS``), its candidates read from fd 8, anything on its stdout or stderr a failure."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = ["up", "status", "restart", "down", "demo", "units", "check", "history", "report", "init", "schema",
            "completion"]
CONFIG = """\
name: tab
commands:
  start: "touch {ran}"
services:
  prefill-0: &prefill {{host: gpu, role: prefill, unit: sglang-prefill, commands: {{start: "touch {ran}"}}}}
  prefill-1: {{<<: *prefill}}
  decode: {{host: gpu, role: decode, unit: sglang-decode}}
  router: {{host: gpu, role: router, unit: sglang-router}}
"""
SERVICES = ["prefill-0", "prefill-1", "decode", "router", "prefills", "decodes"]
# Bash hands pdtui fd 8 for its candidates; here its stdout, while pdtui's own stdout goes to stderr, which must stay
# empty.
SHELL = 'exec 8>&1 9>/dev/null 1>&2; exec "$@"'


def tab(line: str, cwd: Path, *, env: dict[str, str] | None = None, module: bool = False) -> list[str]:
    """What pdtui offers for a TAB at the end of ``line`` (``pdtui ...``), run as ``pdtui`` or as ``python -m
    pdtui``; asserts that it printed nothing else and exited 0. A lone candidate comes with the space bash types
    after it, left off here."""
    if module:
        line = f"python -m {line}"
    environ = {**os.environ, **(env or {}), "_ARGCOMPLETE": "3" if module else "1", "COMP_LINE": line,
               "COMP_POINT": str(len(line)), "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_SHELL": "bash"}
    done = subprocess.run(["bash", "-c", SHELL, "tab", sys.executable, "-m", "pdtui"], cwd=cwd, env=environ,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done
    return [candidate.removesuffix(" ") for candidate in done.stdout.split("\n")] if done.stdout else []


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder a TAB is pressed in; no config of the caller's is found (HOME and XDG_CONFIG_HOME are the test's
    own, $PDTUI_CONFIG unset)."""
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.delenv("PDTUI_CONFIG", raising=False)
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


def config(folder: Path, name: str = "deploy.yaml") -> Path:
    """A config whose commands would leave a file ``ran`` behind if anything ran them."""
    path = folder / name
    path.write_text(CONFIG.format(ran=folder / "ran"))
    return path


@pytest.mark.parametrize("module", [False, True], ids=["pdtui", "python -m pdtui"])
def test_a_tab_after_pdtui_offers_its_commands_only(work, module):
    assert tab("pdtui ", work, module=module) == COMMANDS
    assert tab("pdtui re", work, module=module) == ["restart", "report"]


def test_options_complete_as_the_command_defines_them(work):
    assert tab("pdtui restart --ro", work) == ["--rolling"]
    assert tab("pdtui status --on", work) == ["--once"]
    assert tab("pdtui --headless --on", work) == ["--once"], "options alone go to status, so do their TABs"
    assert tab("pdtui demo --sha", work) == ["--shape"], "demo's own options, from the simulator"
    assert tab("pdtui demo --shape ", work) == ["1p1d", "1p2d", "2p2d"]
    assert tab("pdtui completion ", work) == ["bash", "zsh", "fish", "tcsh", "powershell"]


def test_a_value_that_is_no_file_name_completes_to_nothing(work):
    config(work)
    assert tab("pdtui restart --drain-timeout ", work) == []
    assert tab("pdtui history --limit ", work) == []


def test_service_names_come_from_the_config_named_earlier_on_the_line(work):
    config(work)
    assert tab("pdtui restart deploy.yaml ", work) == SERVICES
    assert tab("pdtui restart --rolling deploy.yaml de", work) == ["decode", "decodes"]
    assert tab("pdtui down deploy.yaml prefill-0 --no-drain pre", work) == ["prefill-1", "prefills"]
    assert tab(f"pdtui restart {work}/deploy.yaml r", Path("/")) == ["router"]
    assert not (work / "ran").exists(), "completion ran a command of the config"


def test_config_arguments_complete_to_yaml_files_and_folders(work):
    for name in ("a.yaml", "b.yml", "notes.txt", ".hidden.yaml", "sub/c.yaml", "sub/d.json"):
        (work / name).parent.mkdir(exist_ok=True)
        (work / name).write_text("services: {}\n")
    assert tab("pdtui up ", work) == ["a.yaml", "b.yml", "sub/"]
    assert tab("pdtui check sub/", work) == ["sub/c.yaml"]
    assert tab("pdtui status .", work) == [".hidden.yaml"]
    assert tab("pdtui restart ", work) == ["a.yaml", "b.yml", "sub/"], "CONFIG may still come; no config found"
    assert tab("pdtui units a.yaml --out ", work) == ["sub/"]


@pytest.mark.parametrize("text", [
    "services: [\n",                                     # not YAML
    "services: [prefill, decode]\n",                     # services not a mapping
    "- a list\n",                                        # no mapping at all
    "services: !!python/object/apply:os.system ['touch {ran}']\n",   # a tag only an unsafe load would run
    "services:\n  prefill: {{role: prefill}}\n\x00",       # a NUL: not text YAML reads
], ids=["syntax", "list", "top-level-list", "python-tag", "nul"])
def test_a_broken_config_completes_to_nothing_and_says_nothing(work, text):
    (work / "broken.yaml").write_text(text.format(ran=work / "ran"))
    assert tab("pdtui restart broken.yaml ", work) == []
    assert not (work / "ran").exists()


def test_a_config_that_cannot_be_read_completes_to_nothing(work):
    assert tab("pdtui restart missing.yaml ", work) == []
    (work / "folder.yaml").mkdir()
    assert tab("pdtui down folder.yaml ", work) == []


def test_without_a_config_on_the_line_the_one_pdtui_finds_gives_the_names(work):
    config(work, "pdtui.yaml")
    assert tab("pdtui restart ", work) == [*SERVICES, "pdtui.yaml"]
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    found = config(work.parent / "home", "mine.yaml")
    assert tab("pdtui down d", elsewhere, env={"PDTUI_CONFIG": str(found)}) == ["decode", "decodes"]
    assert not (work / "ran").exists() and not (work.parent / "home" / "ran").exists()


def test_a_found_config_others_can_write_is_not_read(work):
    path = config(work, "pdtui.yaml")
    path.chmod(0o666)
    assert tab("pdtui restart ", work) == ["pdtui.yaml"]


def test_a_broken_found_config_leaves_the_config_files(work):
    (work / "pdtui.yaml").write_text("services: [\n")
    assert tab("pdtui down ", work) == ["pdtui.yaml"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user (uid 65534) takes root")
def test_a_found_config_of_another_user_is_not_read(work):
    path = config(work, "pdtui.yaml")
    os.chown(path, 65534, -1)
    assert tab("pdtui restart ", work) == ["pdtui.yaml"], "its name, as CONFIG, but none of its services"
    assert tab("pdtui restart pdtui.yaml ", work) == SERVICES, "a config named is the user's choice, as in pdtui"
    elsewhere = work.parent / "elsewhere"
    elsewhere.mkdir()
    assert tab("pdtui down ", elsewhere, env={"PDTUI_CONFIG": str(path)}) == []


def test_a_tab_loads_neither_pydantic_nor_textual(work):
    config(work, "pdtui.yaml")
    line = "pdtui restart "
    environ = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line))}
    done = subprocess.run(["bash", "-c", 'exec "$@" 8>/dev/null', "tab", sys.executable, "-X", "importtime", "-m",
                           "pdtui"], cwd=work, env=environ, capture_output=True, text=True, timeout=60)
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert done.returncode == 0 and {"pdtui.commands.completion", "yaml", "pdtui.config.trust"} <= imported, done.stderr[-2000:]
    assert not {"pydantic", "textual", "asyncssh", "pdtui.config.schema"} & imported


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_pdtui_completion_prints_what_register_python_argcomplete_does(work, shell):
    ours = subprocess.run([sys.executable, "-m", "pdtui", "completion", shell], capture_output=True, text=True,
                          timeout=60)
    theirs = subprocess.run([sys.executable, "-m", "argcomplete.scripts.register_python_argcomplete", "--shell", shell,
                             "pdtui"], capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0 and ours.stderr == ""
    assert ours.stdout == theirs.stdout and "pdtui" in ours.stdout


def test_bash_with_the_script_sourced_completes_pdtui(work):
    """The script pdtui prints, as bash runs it on a TAB: its completion function, calling the ``pdtui`` on PATH."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "pdtui"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} -m pdtui "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    config(work)
    script = subprocess.run([sys.executable, "-m", "pdtui", "completion", "bash"], capture_output=True, text=True,
                            timeout=60, check=True).stdout
    drive = script + '\nCOMP_LINE="pdtui restart deploy.yaml de"; COMP_POINT=${#COMP_LINE}\n' \
                     '_python_argcomplete pdtui; printf "%s\\n" "${COMPREPLY[@]}"\n'
    done = subprocess.run(["bash", "-c", drive], cwd=work, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["decode", "decodes"]


def test_argcomplete_global_completion_finds_the_marker_for_python_m_and_the_console_script():
    """``activate-global-python-argcomplete`` completes only programs that say they answer a TAB
    (``PYTHON_ARGCOMPLETE_OK``): ``python -m pdtui`` (__main__.py) and the ``pdtui`` script (its module, cli.py)."""
    check = [sys.executable, "-W", "ignore", "-m"]
    done = subprocess.run([*check, "argcomplete._check_module", "pdtui"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    script = Path(sys.executable).parent / "pdtui"
    if not script.is_file():
        pytest.skip(f"no pdtui console script beside {sys.executable} (pdtui is not installed in this Python)")
    done = subprocess.run([*check, "argcomplete._check_console_script", str(script)], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
