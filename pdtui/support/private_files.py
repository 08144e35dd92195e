"""Files only their owner reads: pdtui's history and saved logs carry journal text (failure reasons, whole logs).

A folder is made 0700 (an existing one of pdtui's own is narrowed to it); a file is created 0600, exclusively
(O_EXCL: an existing file or a link planted at its name is never written through, O_NOFOLLOW as well). An existing
folder or file is used only when it is what it says (not a link: a chmod would change where it leads) and the
caller's (another user could swap what it holds): the state folder may sit in another user's home (``sudo`` keeping
``HOME``), where that user could plant a link to /etc.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FOLDER_MODE, FILE_MODE = 0o700, 0o600


def private_folder(path: Path) -> Path:
    """``path`` made (with its parents) or narrowed to 0700; PermissionError when it is a link, not a folder, or
    another user's."""
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    fd = _own(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if os.fstat(fd).st_mode & 0o777 != FOLDER_MODE:
            os.fchmod(fd, FOLDER_MODE)
    finally:
        os.close(fd)
    return path


def _own(path: Path, flags: int) -> int:
    """``path`` opened without following a link, checked to be the caller's: its descriptor, or PermissionError."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        if path.is_symlink():
            raise PermissionError(f"{path} is a symbolic link, not used") from None
        raise
    if (owner := os.fstat(fd).st_uid) != os.geteuid():
        os.close(fd)
        raise PermissionError(f"{path} belongs to another user (uid {owner}), not used")
    return fd


def create_private(path: Path, text: str) -> None:
    """A new file at ``path`` holding ``text``, 0600; FileExistsError when anything (a file, a link) is there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)


def private_file(path: Path) -> Path:
    """``path`` made empty 0600 when missing, else narrowed to 0600 (a database sqlite then opens: its journal files
    take the database's mode); PermissionError when it is a link or another user's."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE))
    except FileExistsError:
        fd = _own(path, os.O_RDONLY)
        try:
            if not stat.S_ISREG(mode := os.fstat(fd).st_mode):
                raise PermissionError(f"{path} is not a regular file, not used")
            if mode & 0o777 != FILE_MODE:
                os.fchmod(fd, FILE_MODE)
        finally:
            os.close(fd)
    return path


def read_private(path: Path) -> str | None:
    """The text of the caller's own regular file at ``path``, read without following a link; None when there is
    none, or it is a link, not a regular file, or another user's (what another user could have written is never
    believed)."""
    try:
        fd = _own(path, os.O_RDONLY)
    except OSError:
        return None
    with os.fdopen(fd, encoding="utf-8") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            return file.read()
        except (OSError, UnicodeDecodeError):
            return None


def replace_private(path: Path, text: str) -> None:
    """``path`` made to hold ``text``, 0600, in its private folder: written to a new file of its own beside it, then
    renamed over it (a link at ``path`` is replaced, never written through; a reader never sees half a file)."""
    folder = private_folder(path.parent)
    spare = folder / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}"
    create_private(spare, text)
    try:
        os.replace(spare, path)
    except OSError:
        spare.unlink(missing_ok=True)
        raise
