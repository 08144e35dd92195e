"""The hostile-input corpus: what remote programs, servers, peers and files may send, kept as the bytes they send.

One folder per kind (configs/, http/, web/, ...), each run by one parametrised test per face that shows it. What every
one of those tests asks of a face's output is here: no character that acts on a terminal or hides text.
"""

from __future__ import annotations

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
