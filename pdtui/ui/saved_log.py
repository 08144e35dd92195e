"""A log saved by ``s`` in the terminal: a new file in the working directory, readable by its owner alone."""

from __future__ import annotations

import re
from pathlib import Path

from pdtui.support.private_files import create_private

SAVE_ATTEMPTS = 10_000
"""Numbered names a save tries before it gives up (each press takes a new one; none is ever overwritten)."""


def safe_name(name: str) -> str:
    """A file-name-safe form of a deployment or service name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "pdtui"


def write_new(directory: Path, stem: str, text: str) -> Path:
    """``text`` in a new file ``STEM.log`` (``STEM-N.log`` when taken) in ``directory``, created 0600 exclusively and
    never through a symbolic link: a file already there, or a link planted under the name, is never written."""
    for counter in range(SAVE_ATTEMPTS):
        path = directory / (f"{stem}.log" if counter == 0 else f"{stem}-{counter}.log")
        try:
            create_private(path, text)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(17, f"{SAVE_ATTEMPTS} saved logs already", str(directory / f"{stem}.log"))
