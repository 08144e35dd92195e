"""Making hostile text inert for display.

Journal lines come from remote programs: they may carry terminal escapes
(colours, OSC 52 clipboard writes, window titles), NULs, bidi overrides or a
megabyte of text. Every face of pdtui (TUI, headless, saved logs) shows them
through :func:`inert` or :func:`make_visible`, so a line can only ever appear
as the characters it contains and never act on the terminal. Colour codes (SGR
sequences, which only style text and which the router prints by default) are
dropped; every other escape stays visible as placeholders. Rich markup is not a
concern here: callers build ``rich.text.Text`` from the result, which never
parses markup.
"""

from __future__ import annotations

import re

MAX_LINE_CHARS = 4096
"""Longest prefix of a line that is drawn; the rest is summarised as "… (N more)"."""

TAB_SIZE = 8

# SGR ("select graphic rendition"): ESC [ params m. Nothing but colours and weights.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


def _control_table() -> dict[int, str]:
    """Map every control character to a visible stand-in.

    C0 controls become their Unicode "control pictures" (ESC → ␛, NUL → ␀), DEL
    becomes ␡, and C1 controls and invisible reordering characters (which have no
    picture) are spelled out as ``\\x9b`` / ``\\u202e``.
    """
    table: dict[int, str] = {code: chr(0x2400 + code) for code in range(0x20)}
    del table[ord("\t")]  # expanded to spaces instead
    table[0x7F] = "\u2421"
    for code in range(0x80, 0xA0):
        table[code] = f"\\x{code:02x}"
    for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029, 0x200E, 0x200F):
        table[code] = f"\\u{code:04x}"
    return table


_CONTROLS = _control_table()
# Any character the table changes, or a tab: most log lines have none and are returned as they are.
_NEEDS_WORK = re.compile("[\t" + "".join(re.escape(chr(code)) for code in _CONTROLS) + "]")


def megabytes(size: float) -> str:
    """A size in two or three figures: ``12 GB``, ``2.5 GB``, ``71 MB``, ``4.0 MB``."""
    if size >= 1024:
        gigabytes = size / 1024
        return f"{gigabytes:.0f} GB" if gigabytes >= 10 else f"{gigabytes:.1f} GB"
    return f"{size:.0f} MB" if size >= 10 else f"{size:.1f} MB"


def make_visible(text: str) -> str:
    """Drop colour codes, replace every other control character with a placeholder, expand tabs."""
    if not _NEEDS_WORK.search(text):
        return text
    if "\x1b" in text:
        text = _SGR.sub("", text)
    return text.translate(_CONTROLS).expandtabs(TAB_SIZE)


def inert(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """Return ``text`` ready to draw: capped at ``limit`` characters, controls made visible."""
    extra = len(text) - limit
    if extra > 0:
        return f"{make_visible(text[:limit])}… ({extra} more)"
    return make_visible(text)
