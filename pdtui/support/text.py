"""Making hostile text inert for display.

Journal lines come from remote programs and config files from anyone: they may
carry terminal escapes (colours, OSC 52 clipboard writes, window titles), NULs,
bidi overrides, zero-width characters or a megabyte of text. Every face of pdtui
(TUI, headless, saved logs, error lines) shows them through :func:`inert` or
:func:`make_visible` (JSON through :func:`json_inert`), so a line can only ever
appear as the characters it contains and never act on the terminal. Colour codes
(SGR sequences, which only style text and which the router prints by default)
are dropped; every other invisible character (Unicode's controls, format
characters, surrogates and line/paragraph separators) is shown by a stand-in. Rich markup is not a
concern here: callers build ``rich.text.Text`` from the result, which never
parses markup.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

MAX_LINE_CHARS = 4096
"""Longest prefix of a line that is drawn; the rest is summarised as "… (N more)"."""

TAB_SIZE = 8

# SGR ("select graphic rendition"): ESC [ params m. Nothing but colours and weights.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


_ASCII_INVISIBLE = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
"""The controls an ASCII line can hold (every C0 control but the tab, which is expanded, and DEL)."""

_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Controls, format characters (bidi marks and overrides, zero-width characters, the BOM), lone surrogates (a file
name's undecodable bytes) and the line and paragraph separators: none draws as itself, so each is shown by its code."""


@functools.cache
def _invisible() -> re.Pattern[str]:
    """One character class of every invisible character but the tab, from ``unicodedata`` over the whole code space.

    Made on first need (a non-ASCII line that is not plain printable text): the scan takes a tenth of a second, which a
    command that never sees such a line does not pay.
    """
    category = unicodedata.category
    codes = [code for code in range(sys.maxunicode + 1) if category(chr(code)) in _INVISIBLE_CATEGORIES]
    codes.remove(ord("\t"))
    spans: list[list[int]] = []
    for code in codes:
        if spans and spans[-1][1] == code - 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    return re.compile("[" + "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in spans) + "]")


def _stand_in(match: re.Match[str]) -> str:
    """The visible stand-in of one invisible character: a C0 control's picture (ESC as ␛, NUL as ␀), DEL as ␡, a C1
    control as ``\\x9b``, any other by its code point: ``\\u061c``, ``\\U000e0001``."""
    code = ord(match[0])
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    if code < 0xA0:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _json_escape(match: re.Match[str]) -> str:
    """One invisible character as a JSON escape (a UTF-16 surrogate pair beyond the BMP, as JSON spells it)."""
    code = ord(match[0])
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _finder(text: str) -> re.Pattern[str]:
    """The class to look for in ``text``: the few ASCII controls for an ASCII line, every invisible one otherwise."""
    return _ASCII_INVISIBLE if text.isascii() else _invisible()


def megabytes(size: float) -> str:
    """A size in two or three figures: ``12 GB``, ``2.5 GB``, ``71 MB``, ``4.0 MB``."""
    if size >= 1024:
        gigabytes = size / 1024
        return f"{gigabytes:.0f} GB" if gigabytes >= 10 else f"{gigabytes:.1f} GB"
    return f"{size:.0f} MB" if size >= 10 else f"{size:.1f} MB"


def make_visible(text: str) -> str:
    """Drop colour codes, replace every other invisible character with a visible stand-in, expand tabs."""
    if text.isprintable():      # most lines: nothing to do
        return text
    if "\x1b" in text:
        text = _SGR.sub("", text)
    return _finder(text).sub(_stand_in, text).expandtabs(TAB_SIZE)


def json_inert(text: str) -> str:
    """JSON text with every invisible character JSON leaves raw (DEL, C1, format characters, separators) escaped:
    the same data to a parser, inert on a terminal."""
    if text.isprintable():
        return text
    return _finder(text).sub(_json_escape, text)


def redrawn(text: str) -> str:
    """A line that redraws itself with carriage returns (a progress bar: ``\rloading 0%\rloading 100%``) as a
    terminal leaves it: each part written over the one before from the line's start. Only what a terminal would
    show is dropped; the line's other controls are still there to be made visible."""
    return "\n".join(_redrawn_row(row) for row in text.split("\n"))


def _redrawn_row(row: str) -> str:
    parts = row.split("\r")
    shown = parts[0]
    for part in parts[1:]:
        shown = part + shown[len(part):]
    return shown


def inert(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """Return ``text`` ready to draw: as a terminal leaves a line its carriage returns redraw, capped at ``limit``
    characters, controls made visible. (A saved line keeps every state: :func:`make_visible`.)"""
    if "\r" in text:
        text = redrawn(text)
    extra = len(text) - limit
    if extra > 0:
        return f"{make_visible(text[:limit])}… ({extra} more)"
    return make_visible(text)
