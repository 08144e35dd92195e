"""Themes are the ``.tcss`` files of ``themes/`` (see pdtui/data.py); ``--theme NAME`` picks one.

A theme file defines the ``$pd-*`` colour variables that ``pdtui/ui/layout.tcss``
uses, and names on its first line the Textual theme its built-in widgets (footer,
input, toasts, command palette) should follow: ``/* textual-theme: NAME */``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pdtui.data import data_dir

DEFAULT_THEME = "dark"
_BASE = re.compile(r"/\*\s*textual-theme:\s*([\w-]+)\s*\*/")


@dataclass(frozen=True)
class Theme:
    name: str
    textual_theme: str      # the Textual theme for built-in widgets
    css: str                # theme variables followed by the layout


def _theme_dir() -> Path:
    return data_dir("themes")


def available_themes() -> list[str]:
    """Names of the shipped themes, sorted."""
    return sorted(
        entry.name.removesuffix(".tcss") for entry in _theme_dir().iterdir() if entry.name.endswith(".tcss")
    )


def load_theme(name: str) -> Theme:
    """Theme ``name`` with the layout appended; ``ValueError`` (one line, listing the choices) if unknown."""
    names = available_themes()
    if name not in names:
        raise ValueError(f"unknown theme {name!r}; available themes: {', '.join(names)}")
    variables = _theme_dir().joinpath(f"{name}.tcss").read_text(encoding="utf-8")
    layout = resources.files("pdtui.ui").joinpath("layout.tcss").read_text(encoding="utf-8")
    base = _BASE.search(variables)
    return Theme(name, base.group(1) if base else "textual-dark", f"{variables}\n{layout}")
