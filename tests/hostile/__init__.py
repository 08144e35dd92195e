"""The hostile-input corpus: what remote programs, servers, peers and files may send, kept as the bytes they send.

One folder per kind (configs/, http/, web/, ...), each run by one parametrised test per face that shows it. What every
one of those tests asks of a face's output is here: no character that acts on a terminal or hides text.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

CORPUS = Path(__file__).parent


def files(kind: str, suffix: str) -> list[Path]:
    """The corpus's files of one kind, sorted (a test's parameters)."""
    return sorted((CORPUS / kind).glob(f"*{suffix}"))


def acting(text: str) -> list[str]:
    """The characters of ``text`` that act on a terminal or hide what is shown: controls (ESC, BEL, C1, ...) but the
    newline, format characters (bidi marks, zero-width characters), line and paragraph separators."""
    return sorted({c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")})


def confined(folder: Path, env: dict[str, str] | None = None) -> tuple[dict[str, str], Path]:
    """Where a face run on hostile input may write, all in ``folder``: its $HOME (``env``'s, when it brings one),
    its state folder, and an empty working directory; the environment to run it with, and that directory."""
    work, state = folder / "work", folder / "state"
    work.mkdir(parents=True)
    state.mkdir()
    base = env if env is not None else {**os.environ, "HOME": str(folder / "home")}
    return {**base, "XDG_STATE_HOME": str(state), "XDG_CACHE_HOME": str(folder / "cache")}, work


def written(folder: Path) -> list[str]:
    """What a confined run in ``folder`` wrote beside pdtui's own run history (its state folder's pdtui/): each one a
    write the hostile input made, as nothing else writes there."""
    history = folder / "state" / "pdtui"
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")
                  if path.is_file() and not path.is_relative_to(history))
