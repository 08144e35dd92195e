"""Secrets masked in text: one redactor per deployment, built once from its secret values (pdtui/config/secrets.py).

Servers print secrets (SGLang logs its server_args, ``--api-key`` included, at start): every line that enters the
engine passes through :meth:`Redactor.redact` once, before any face, saved log, history or JSON sees it. One
Aho-Corasick automaton finds every secret in one pass over a line; a line without any costs one scan.

A secret is found in any case (a token printed upper-cased, a percent-encoding in lower-case hex), and in the forms
a server's text carries it: escaped as in JSON or a Python repr (a server logging its arguments as a dict, a secret
holding a quote or a backslash), and percent-encoded (in a URL it logs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from ahocorasick_rs import MATCHKIND_LEFTMOST_LONGEST, AhoCorasick

MASK = "<secret>"
MIN_SECRET = 4
"""Shorter values are not masked: a secret of one to three characters would mask every such run of text (and is no
secret worth the name)."""


def forms(secret: str) -> set[str]:
    """Each way a text may spell ``secret`` (compared in lower case): as it is, JSON- and repr-escaped,
    percent-encoded."""
    escaped = json.dumps(secret)[1:-1]
    spelled = {secret, escaped, escaped.replace("/", "\\/"), json.dumps(secret, ensure_ascii=False)[1:-1],
               repr(secret)[1:-1], secret.replace("\\", "\\\\").replace("'", "\\'"),    # a repr, either quote
               quote(secret, safe=""), quote(secret), quote_plus(secret)}
    return {form.lower() for form in spelled}


class Redactor:
    """Replaces every secret value in a text (in any of its :func:`forms`, in any case) by :data:`MASK`."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET}))
        patterns = sorted({form for secret in self.secrets for form in forms(secret)})
        self._automaton = AhoCorasick(patterns, matchkind=MATCHKIND_LEFTMOST_LONGEST) if patterns else None

    def __bool__(self) -> bool:
        return self._automaton is not None

    def redact(self, text: str) -> str:
        """``text`` with each secret masked (as it is, when it holds none)."""
        if self._automaton is None:
            return text
        lowered = text.lower()
        if len(lowered) != len(text):      # a character whose lower case is longer (U+0130): keep the places
            lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
        found = self._automaton.find_matches_as_indexes(lowered)
        if not found:
            return text
        parts, at = [], 0
        for _, start, end in found:
            parts += [text[at:start], MASK]
            at = end
        parts.append(text[at:])
        return "".join(parts)
