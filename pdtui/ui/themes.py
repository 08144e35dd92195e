"""Themes are ``.tcss`` files shipped in ``pdtui/themes``; ``--theme NAME`` picks one.

A theme file defines the ``$pd-*`` colour variables that ``pdtui/ui/layout.tcss``
uses, and names on its first line the Textual theme its built-in widgets (footer,
input, toasts, command palette) should follow: ``/* textual-theme: NAME */``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

DEFAULT_THEME = "dark"
_BASE = re.compile(r"/\*\s*textual-theme:\s*([\w-]+)\s*\*/")


@dataclass(frozen=True)
class Theme:
    name: str
    textual_theme: str      # the Textual theme for built-in widgets
    css: str                # theme variables followed by the layout


def _theme_dir() -> Traversable:
    return resources.files("pdtui").joinpath("themes")


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
