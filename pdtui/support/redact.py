"""Secrets masked in text: one redactor per deployment, built once from its secret values (pdtui/config/secrets.py).

Servers print secrets (SGLang logs its server_args, ``--api-key`` included, at start): every line that enters the
engine passes through :meth:`Redactor.redact` once, before any face, saved log, history or JSON sees it. One
Aho-Corasick automaton finds every secret in one pass over a line; a line without any costs one scan.

A secret is found in any case (a token printed upper-cased, a percent-encoding in lower-case hex), and in the forms
a server's text carries it: escaped as in JSON or a Python repr (a server logging its arguments as a dict, a secret
holding a quote or a backslash), and percent-encoded (in a URL it logs).

A secret pdtui was never told (a hand-written unit's ``--api-key``, an installed unit's old token) is masked by where
it stands, when the redactor is given the words a secret's name ends with (``words``): the value assigned to a name
that says so (``api_key='sk-…'``, ``HF_TOKEN=hf_…``, ``"api_key": "sk-…"``), given to a flag named so
(``--api-key sk-…``), or sent in an ``Authorization`` or ``Cookie`` header. A colon after a bare name is not an
assignment (SGLang's ``#new-token: 7``).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from ahocorasick_rs import MATCHKIND_LEFTMOST_LONGEST, AhoCorasick

MASK = "<secret>"
MIN_SECRET = 4
"""Shorter values are not masked: a secret of one to three characters would mask every such run of text (and is no
secret worth the name)."""
NO_SECRET = frozenset({"true", "false", "none", "null"})
"""Values never masked, though a variable named as a secret holds one (``USE_AUTH=true``): matched in any case, they
would mask every ``True`` of a server's arguments."""


def forms(secret: str) -> set[str]:
    """Each way a text may spell ``secret`` (compared in lower case): as it is, JSON- and repr-escaped,
    percent-encoded, quoted for the shell (a job script's ``export``) and as a unit's ``ExecStart=`` word."""
    escaped = json.dumps(secret)[1:-1]
    unit_word = secret.replace("%", "%%").replace("$", "$$")
    spelled = {secret, escaped, escaped.replace("/", "\\/"), json.dumps(secret, ensure_ascii=False)[1:-1],
               repr(secret)[1:-1], secret.replace("\\", "\\\\").replace("'", "\\'"),    # a repr, either quote
               quote(secret, safe=""), quote(secret), quote_plus(secret), shlex.quote(secret),
               unit_word, unit_word.replace("\\", "\\\\").replace('"', '\\"')}
    return {form.lower() for form in spelled}


_AFTER = re.compile(r"""(["']?)(=|:[ \t]*|[ \t]+)\[?((?:bearer|basic|token)[ \t]+)?""")
"""What follows a secret's name that assigns it a value (matched in lower case): ``=``, ``:``, blanks, the bracket
of a list (vLLM's ``api_key=['…']``) and an ``Authorization`` header's scheme."""
_VALUE = re.compile(r"""\"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s"',;)}\]&]+""")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
_NOTHING = frozenset({"none", "null", "''", '""', "false", MASK.lower()})


def _assigns(name: str, quote: str, sep: str, value: str) -> bool:
    """Whether ``name SEP value`` gives a secret a value: ``=``; ``:`` after a quoted key (JSON, a dict) or a
    header's name; blanks after a flag (``--api-key KEY``)."""
    if value.lower() in _NOTHING:
        return False
    if name in _HEADERS or sep == "=":
        return True
    if sep == ":":
        return bool(quote)
    return name.startswith("-") and not value.startswith("-")


class Redactor:
    """Replaces every secret value in a text (in any of its :func:`forms`, in any case) by :data:`MASK`; given the
    ``words`` a secret's name ends with, every value given to such a name too."""

    def __init__(self, secrets: Iterable[str], words: Iterable[str] = ()) -> None:
        self.secrets = tuple(sorted({s for s in secrets if len(s) >= MIN_SECRET and s.lower() not in NO_SECRET}))
        patterns = sorted({form for secret in self.secrets for form in forms(secret)})
        self._automaton = AhoCorasick(patterns, matchkind=MATCHKIND_LEFTMOST_LONGEST) if patterns else None
        names = sorted({word.lower() for word in words})
        self._names = (AhoCorasick([*names, *_HEADERS], matchkind=MATCHKIND_LEFTMOST_LONGEST) if names else None)

    def __bool__(self) -> bool:
        return self._automaton is not None or self._names is not None

    def redact(self, text: str, *, by_name: bool = True) -> str:
        """``text`` with each secret masked (as it is, when it holds none). ``by_name=False``: the known values
        alone, for pdtui's own words, which name secrets' flags without giving them a value (``its --api-key or
        --control-plane-api-keys``)."""
        if self._automaton is None and (self._names is None or not by_name):
            return text
        lowered = text.lower()
        if len(lowered) != len(text):      # a character whose lower case is longer (U+0130): keep the places
            lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
        spans = [(start, end) for _, start, end in self._automaton.find_matches_as_indexes(lowered)] \
            if self._automaton is not None else []
        if self._names is not None and by_name:
            spans += self._assigned(text, lowered)
        if not spans:
            return text
        parts, at = [], 0
        for start, end in sorted(spans):
            if start < at:          # overlaps the span masked last: it grows
                at = max(at, end)
                continue
            parts += [text[at:start], MASK]
            at = end
        parts.append(text[at:])
        return "".join(parts)

    def _assigned(self, text: str, lowered: str) -> list[tuple[int, int]]:
        """Where the values given to a secret's name stand in ``text`` (inside their quotes). The character after
        the name rules most out at once: most lines that name a token count them (``#new-token: 7``)."""
        assert self._names is not None
        spans = []
        for _, start, end in self._names.find_matches_as_indexes(lowered):
            after = lowered[end:end + 1]
            if after == ":" and lowered[start:end] not in _HEADERS:
                continue        # a bare name and a colon: a count, a label (a header's name aside)
            if after not in ('=', ':', '"', "'", " ", "\t"):
                continue        # the name goes on (--max-total-tokens), or is no key (token/s)
            begin = start
            while begin and text[begin - 1] in _NAME_CHARS:
                begin -= 1
            if after in " \t" and lowered[begin] != "-":
                continue        # blanks give a value to a flag only
            if (assigned := _AFTER.match(lowered, end)) is None or (value := _VALUE.match(text, assigned.end())) is None:
                continue
            if not _assigns(lowered[begin:end], assigned[1], assigned[2].strip(), value[0]):
                continue
            quoted = value[0][0] in "\"'" and len(value[0]) > 1
            spans.append((value.start() + 1, value.end() - 1) if quoted else value.span())
        return spans
