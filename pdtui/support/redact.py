"""Secrets masked in text: one redactor per deployment, built once from its secret values (pdtui/config/secrets.py).

Servers print secrets (SGLang logs its server_args, ``--api-key`` included, at start): every line that enters the
engine passes through :meth:`Redactor.redact` once, before any face, saved log, history or JSON sees it. One
Aho-Corasick automaton finds every secret in one pass over a line; a line without any costs one scan.
"""

from __future__ import annotations

from collections.abc import Iterable

from ahocorasick_rs import MATCHKIND_LEFTMOST_LONGEST, AhoCorasick

MASK = "<secret>"
MIN_SECRET = 4
"""Shorter values are not masked: a secret of one to three characters would mask every such run of text (and is no
secret worth the name)."""


class Redactor:
    """Replaces every secret value in a text by :data:`MASK`."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET}))
        self._automaton = AhoCorasick(list(self.secrets), matchkind=MATCHKIND_LEFTMOST_LONGEST) if self.secrets else None

    def __bool__(self) -> bool:
        return self._automaton is not None

    def redact(self, text: str) -> str:
        """``text`` with each secret masked (as it is, when it holds none)."""
        if self._automaton is None:
            return text
        found = self._automaton.find_matches_as_indexes(text)
        if not found:
            return text
        parts, at = [], 0
        for _, start, end in found:
            parts += [text[at:start], MASK]
            at = end
        parts.append(text[at:])
        return "".join(parts)
