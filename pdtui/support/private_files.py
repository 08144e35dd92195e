"""Files only their owner reads: pdtui's history and saved logs carry journal text (failure reasons, whole logs).

A folder is made 0700 (an existing one of pdtui's own is narrowed to it); a file is created 0600, exclusively
(O_EXCL: an existing file or a link planted at its name is never written through, O_NOFOLLOW as well).
"""

from __future__ import annotations

import os
from pathlib import Path

FOLDER_MODE, FILE_MODE = 0o700, 0o600


def private_folder(path: Path) -> Path:
    """``path`` made (with its parents) or narrowed to 0700."""
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != FOLDER_MODE:
        path.chmod(FOLDER_MODE)
    return path


def create_private(path: Path, text: str) -> None:
    """A new file at ``path`` holding ``text``, 0600; FileExistsError when anything (a file, a link) is there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)


def private_file(path: Path) -> Path:
    """``path`` made empty 0600 when missing, else narrowed to 0600 (a database sqlite then opens: its journal files
    take the database's mode)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE))
    except FileExistsError:
        if path.stat().st_mode & 0o777 != FILE_MODE:
            path.chmod(FILE_MODE)
    return path
