"""Whether a config file may be used without being named: who owns it and who can write it, as git's safe.directory.

A config's ``commands:`` run as the user who runs pdtui, often root. Bare ``pdtui``, ``status``, ``restart`` and
``down`` find a config by themselves (config/discovery.py), in the current folder among others: a file another user
put in a folder root ``cd``\\s into would run that user's commands as root. So a config found that way is used only
when the file, and the folder it sits in, belong to the caller or root and nobody else can write them; a symlink is
followed, hop by hop, each link and the folder it sits in held to the same. A group counts as nobody else when it is
the caller's own (the user's private group, named as the user and with no other members: what a umask of 002 gives
every file on such systems). A config named on the command line is the user's choice: the same facts are told as a
warning, and it is used.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

from pdtui.support.text import inert

MAX_HOPS = 40
"""Symlinks followed at most (Linux's own limit): a longer chain is not trusted."""


def distrust(path: str | os.PathLike[str], uid: int | None = None) -> str | None:
    """Why the config at ``path`` may not be used unnamed, in words that follow "the config ..." (``it is owned by uid
    65534 (nobody), ...``), or None when it may.

    ``uid``: the caller (default: the effective user). A path that is missing or unreadable is None: loading it will
    say what is wrong.
    """
    uid = os.geteuid() if uid is None else uid
    here = Path(os.path.abspath(path))
    for hop in range(MAX_HOPS):
        try:
            info = os.lstat(here)
            folder = os.stat(here.parent)
        except OSError:
            return None
        it = "it" if hop == 0 else f"it leads to {inert(str(here))}, which"
        its = "its" if hop == 0 else f"it leads to {inert(str(here))}, whose"
        why = _unsafe(info, uid)
        if why:
            return f"{it} {why}"
        why = _unsafe(folder, uid)
        if why:
            return f"{its} folder {inert(str(here.parent))} {why}"
        if not stat.S_ISLNK(info.st_mode):
            return None
        try:
            here = Path(os.path.normpath(here.parent / os.readlink(here)))
        except OSError:
            return None
    return f"it is a chain of more than {MAX_HOPS} symlinks"


def _unsafe(info: os.stat_result, uid: int) -> str | None:
    """Why one file, link or folder is not safe, in words that follow its name: another user owns it, or others may
    write it."""
    mode = f"mode {stat.S_IMODE(info.st_mode):04o}"
    if info.st_uid not in (uid, 0):
        return f"is owned by {_user(info.st_uid)}, not by you or root ({mode})"
    others = info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and not _own_group(info.st_gid, uid))
    if others and not stat.S_ISLNK(info.st_mode):      # a link's own mode is always 0777 and means nothing
        return f"can be written by others ({mode}, group {_group(info.st_gid)})"
    return None


def _own_group(gid: int, uid: int) -> bool:
    """Whether ``gid`` is the private group of the user ``uid``: named as the user, no other member."""
    try:
        user, group = pwd.getpwuid(uid), grp.getgrgid(gid)
    except KeyError:
        return False
    return user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _user(uid: int) -> str:
    """``uid 65534 (nobody)``, or the number alone when no user has it."""
    try:
        return f"uid {uid} ({inert(pwd.getpwuid(uid).pw_name, 64)})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{inert(grp.getgrgid(gid).gr_name, 64)} ({gid})"
    except KeyError:
        return str(gid)
