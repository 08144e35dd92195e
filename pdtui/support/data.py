"""Where pdtui's data folders are: ``themes/`` and ``sample_configs/``.

They live at the top of the repository and are shipped inside the wheel as
``pdtui/themes`` and ``pdtui/sample_configs`` (hatch force-include); an
installed wheel finds them beside the package, a checkout (or an editable
install of one) at the repository's top.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]


def data_dir(name: str) -> Path:
    """The folder ``name`` (``themes`` or ``sample_configs``) of this installation."""
    shipped = _PACKAGE / name
    return shipped if shipped.is_dir() else _PACKAGE.parent / name
