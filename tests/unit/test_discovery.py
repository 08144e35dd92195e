"""Which config a bare ``pdtui`` uses: $PDTUI_CONFIG, ./pdtui.yaml, ./pdtui.yml, the XDG config folder."""

from pathlib import Path

import pytest

from pdtui.config.discovery import find_config, not_found_message


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A working folder and a home folder, both empty, and an environment naming the home."""
    cwd, home = tmp_path / "work", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    return cwd, home, {"HOME": str(home)}


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("name: x\n")
    return path


def test_pdtui_config_wins_over_a_file_in_the_folder(places):
    cwd, home, env = places
    touch(cwd / "pdtui.yaml")
    chosen = touch(home / "deploy.yaml")
    assert find_config({**env, "PDTUI_CONFIG": str(chosen)}, cwd) == (chosen, [chosen])


def test_pdtui_config_naming_no_file_is_not_found_and_ends_the_search(places):
    cwd, home, env = places
    touch(cwd / "pdtui.yaml")
    missing = home / "gone.yaml"
    assert find_config({**env, "PDTUI_CONFIG": str(missing)}, cwd) == (None, [missing])


def test_a_relative_pdtui_config_is_read_from_the_folder(places):
    cwd, _, env = places
    chosen = touch(cwd / "conf" / "d.yaml")
    assert find_config({**env, "PDTUI_CONFIG": "conf/d.yaml"}, cwd)[0] == chosen


def test_a_quoted_tilde_in_pdtui_config_is_the_home_folder(places):
    cwd, home, env = places
    chosen = touch(home / "d.yaml")
    assert find_config({**env, "PDTUI_CONFIG": "~/d.yaml"}, cwd)[0] == chosen


def test_an_empty_pdtui_config_counts_as_unset(places):
    cwd, _, env = places
    local = touch(cwd / "pdtui.yaml")
    assert find_config({**env, "PDTUI_CONFIG": ""}, cwd)[0] == local


def test_yaml_comes_before_yml_in_the_folder(places):
    cwd, _, env = places
    touch(cwd / "pdtui.yml")
    yaml_file = touch(cwd / "pdtui.yaml")
    assert find_config(env, cwd)[0] == yaml_file


def test_the_yml_file_in_the_folder_is_found_alone(places):
    cwd, _, env = places
    yml = touch(cwd / "pdtui.yml")
    assert find_config(env, cwd)[0] == yml


def test_the_folder_comes_before_the_xdg_config_folder(places):
    cwd, home, env = places
    touch(home / ".config" / "pdtui" / "pdtui.yaml")
    local = touch(cwd / "pdtui.yml")
    assert find_config(env, cwd)[0] == local


def test_xdg_config_home_defaults_to_dot_config_in_home(places):
    cwd, home, env = places
    chosen = touch(home / ".config" / "pdtui" / "pdtui.yaml")
    assert find_config(env, cwd)[0] == chosen


def test_xdg_config_home_when_set_replaces_dot_config(places, tmp_path):
    cwd, home, env = places
    touch(home / ".config" / "pdtui" / "pdtui.yaml")
    chosen = touch(tmp_path / "xdg" / "pdtui" / "pdtui.yml")
    assert find_config({**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}, cwd)[0] == chosen


def test_a_relative_xdg_config_home_is_ignored_as_the_spec_says(places):
    cwd, home, env = places
    touch(cwd / "rel" / "pdtui" / "pdtui.yaml")
    chosen = touch(home / ".config" / "pdtui" / "pdtui.yaml")
    assert find_config({**env, "XDG_CONFIG_HOME": "rel"}, cwd)[0] == chosen


def test_nothing_found_lists_every_place_in_order(places):
    cwd, home, env = places
    config = home / ".config" / "pdtui"
    assert find_config(env, cwd) == (None, [cwd / "pdtui.yaml", cwd / "pdtui.yml",
                                            config / "pdtui.yaml", config / "pdtui.yml"])


def test_without_home_or_xdg_only_the_folder_is_looked_at(places):
    cwd, _, _ = places
    assert find_config({}, cwd) == (None, [cwd / "pdtui.yaml", cwd / "pdtui.yml"])


def test_a_folder_named_pdtui_yaml_is_not_a_config(places):
    cwd, _, env = places
    (cwd / "pdtui.yaml").mkdir()
    yml = touch(cwd / "pdtui.yml")
    assert find_config(env, cwd)[0] == yml


def test_the_message_lists_the_places_and_offers_demo_and_init(places):
    cwd, _, env = places
    _, looked = find_config(env, cwd)
    message = not_found_message(looked)
    lines = message.splitlines()
    assert lines[0] == "pdtui: no deployment config found. Looked for:"
    assert lines[1:5] == [f"  {path}" for path in looked]
    assert any(line.split()[:2] == ["pdtui", "demo"] and "simulated" in line for line in lines)
    assert any(line.split()[:2] == ["pdtui", "init"] and "pdtui.yaml" in line for line in lines)
    assert len(lines) <= 10


def test_the_message_names_a_pdtui_config_that_is_missing(places):
    cwd, _, env = places
    env = {**env, "PDTUI_CONFIG": "nope.yaml"}
    _, looked = find_config(env, cwd)
    first = not_found_message(looked, env).splitlines()[0]
    assert first == f"pdtui: $PDTUI_CONFIG is nope.yaml, but there is no file {cwd / 'nope.yaml'}."


def test_the_message_shows_escapes_in_the_names_as_text(places):
    cwd, _, env = places
    env = {**env, "PDTUI_CONFIG": "\x1b]52;c;eA==\x07.yaml"}
    _, looked = find_config(env, cwd)
    first = not_found_message(looked, env).splitlines()[0]
    assert first.startswith("pdtui: $PDTUI_CONFIG is ␛]52;c;eA==␇.yaml, but") and "\x1b" not in first
