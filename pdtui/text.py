"""Making hostile text inert for display.

Journal lines come from remote programs: they may carry terminal escapes
(colours, OSC 52 clipboard writes, window titles), NULs, or absurd lengths.
Every face of pdtui (TUI and headless) shows them through :func:`inert`, which
turns every control character into a visible placeholder so nothing a log line
contains can act on the user's terminal. Colour codes (SGR sequences, which
only style text and which the router prints by default) are dropped; every
other escape stays visible. (Rich markup is a separate matter: the UI never
parses log text as markup.)
"""

from __future__ import annotations

import re

MAX_LINE = 4096

# SGR ("select graphic rendition"): ESC [ params m. Nothing but colours and weights.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
# C0 controls except TAB, DEL, and C1 controls.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _placeholder(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)          # ␀ ␁ ... ␛ ...: the Control Pictures block
    if code == 0x7F:
        return "\u2421"                    # ␡
    return f"\\x{code:02x}"                # C1 controls have no pictures


def inert(text: str, limit: int = MAX_LINE) -> str:
    """``text`` with every control character shown as a placeholder, cut to ``limit`` chars."""
    if len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit} more characters)"
    if "\x1b" in text:
        text = _SGR.sub("", text)
    return _CONTROL.sub(_placeholder, text).replace("\t", "    ")
