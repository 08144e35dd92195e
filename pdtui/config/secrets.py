"""Which values of a config are secrets: the one home of the rule.

An environment variable is secret when the config says so (a launch's ``secret_env: [NAME, ...]``) or when its
name says so (``HF_TOKEN``, ``OPENAI_API_KEY``, ``DB_PASSWORD``: :data:`SECRET_WORDS`). A flag of a launch's
``args`` or ``command`` named so (``--api-key KEY``, ``--api-key=KEY``) carries a secret too, and so does an
assignment there to a variable named so (``env HF_TOKEN=VALUE ...``). A secret never lands in a file others
may read, on a command line pdtui runs, or in what pdtui shows or keeps (pdtui/support/redact.py masks it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

SECRET_WORDS = ("TOKEN", "KEY", "KEYS", "SECRET", "SECRETS", "PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE",
                "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "COOKIES", "PRIVATE")
"""A name one of whose words (split at anything but letters and digits) ends with one of these, in any case, names a
secret: ``HF_TOKEN``, ``api-key``, ``OPENAI_APIKEY``. A word that only begins with one does not: ``--max-total-tokens``,
``--tokenizer-path`` and ``TOKENIZERS_PARALLELISM`` hold no secret (their values, ``8192`` or ``false``, would be
masked in every line)."""
_WORD = re.compile(r"[A-Za-z0-9]+")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def secret_name(name: str) -> bool:
    """Whether a variable or flag name says it holds a secret."""
    return any(word.upper().endswith(SECRET_WORDS) for word in _WORD.findall(name))


def secret_args(args: Iterable[str]) -> Iterator[str]:
    """The secret values of an argv: those of the flags named as secrets (``--api-key KEY``, ``--api-key=KEY``) and
    of the assignments to a variable named so (``env HF_TOKEN=VALUE python ...``)."""
    words = list(args)
    for index, word in enumerate(words):
        if not word.startswith("-"):
            name, equals, value = word.partition("=")
            if equals and _ASSIGNMENT.fullmatch(name) and secret_name(name):
                yield value
            continue
        flag, equals, value = word.partition("=")
        if not secret_name(flag):
            continue
        if equals:
            yield value
        elif index + 1 < len(words) and not words[index + 1].startswith("--"):
            yield words[index + 1]
