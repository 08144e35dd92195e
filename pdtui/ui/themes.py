"""Themes are the YAML files of ``themes/`` (see pdtui/support/data.py); ``--theme NAME`` picks ``NAME.yaml``.

Each file holds the keyword arguments of a Textual :class:`~textual.theme.Theme`, which the
app registers as ``pdtui-NAME``: the colours of Textual's own widgets (footer, input, toasts,
command palette), and under ``variables`` the ``pd-*`` colours ``pdtui/ui/layout.tcss`` uses.
Reading and checking a file needs no Textual, so the command line refuses a bad ``--theme``
without loading the UI; a bad file is one ``FILE:LINE:COL`` line, as a bad config is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtui.config.errors import ConfigError, show, unknown_key
from pdtui.config.yamlpos import Walker, compose, error_at, read_text
from pdtui.support.data import data_dir

DEFAULT_THEME = "dark"
SUFFIX = ".yaml"
TEXTUAL_PREFIX = "pdtui-"

COLOURS = ("primary", "secondary", "warning", "error", "success", "accent",
           "foreground", "background", "surface", "panel", "boost")
SWITCHES = ("dark", "ansi")
NUMBERS = ("luminosity_spread", "text_alpha")
KEYS = (*COLOURS, *SWITCHES, *NUMBERS, "variables")
"""Every keyword argument of Textual's ``Theme`` but ``name`` (a test holds this to Textual's)."""


@dataclass(frozen=True)
class ThemeFile:
    """A theme file read and checked: ``settings`` are its Textual theme's keyword arguments."""

    name: str
    settings: dict[str, Any]

    @property
    def textual_name(self) -> str:
        """The name the app registers it under: apart from Textual's own ``textual-dark`` and friends."""
        return f"{TEXTUAL_PREFIX}{self.name}"

    @property
    def variables(self) -> dict[str, str]:
        return dict(self.settings.get("variables", {}))


def _theme_dir() -> Path:
    return data_dir("themes")


def available_themes() -> list[str]:
    """Names of the shipped themes, sorted."""
    return sorted(entry.name.removesuffix(SUFFIX) for entry in _theme_dir().iterdir() if entry.name.endswith(SUFFIX))


def read_theme(name: str) -> ThemeFile:
    """Theme ``name``; ``ValueError`` (one line, listing the choices) if unknown, ``ConfigError`` if its file is bad."""
    names = available_themes()
    if name not in names:
        raise ValueError(f"unknown theme {name!r}; available themes: {', '.join(names)}")
    source = str(_theme_dir() / f"{name}{SUFFIX}")
    root = compose(read_text(source), source)
    if root is None:
        raise ConfigError(source, 1, 1, "empty theme, expected Textual theme settings (primary, variables, ...)")
    walker = Walker(source)
    data = walker.walk(root, ())
    if not isinstance(data, dict):
        raise error_at(source, root.start_mark, f"expected a mapping of Textual theme settings, got {show(data)}")
    for path, problem, on in _problems(data):
        line, col = walker.positions.find(path, on)
        raise ConfigError(source, line, col, problem)
    return ThemeFile(name, data)


def _problems(data: dict[str, Any]) -> list[tuple[tuple[str, ...], str, str]]:
    """What is wrong with a theme's settings: (where, what, on its key or its value), in file order."""
    problems: list[tuple[tuple[str, ...], str, str]] = []
    for key, value in data.items():
        if key not in KEYS:
            problems.append(((key,), unknown_key((), key, KEYS), "key"))
        elif key == "variables":
            problems += _variable_problems(value)
        else:
            wrong = _wrong(key, value)
            if wrong:
                problems.append(((key,), wrong, "value"))
    return problems


def _wrong(key: str, value: Any) -> str:
    """Why ``value`` cannot be theme setting ``key``, or ``""``."""
    if key in COLOURS:
        return "" if isinstance(value, str) and value else _colour_expected(f"'{key}'", value)
    if key in SWITCHES:
        return "" if isinstance(value, bool) else f"expected true or false for '{key}', got {show(value)}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ""
    return f"expected a number for '{key}', got {show(value)}"


def _variable_problems(value: Any) -> list[tuple[tuple[str, ...], str, str]]:
    if not isinstance(value, dict):
        return [(("variables",), f"expected a mapping of CSS variables ('pd-text: \"#d8dee9\"'), got {show(value)}", "value")]
    return [(("variables", name), _colour_expected(f"variable '{name}'", setting, "a CSS value"), "value")
            for name, setting in value.items() if not (isinstance(setting, str) and setting)]


def _colour_expected(what: str, value: Any, expected: str = "a colour") -> str:
    hint = " (quote it: an unquoted # starts a YAML comment)" if value is None else ""
    return f"expected {expected} such as \"#0178d4\" for {what}, got {show(value)}{hint}"
