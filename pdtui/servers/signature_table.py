"""A serving engine's log signatures as a table: its servers', its router's, and what else its lines say.

Each engine's package declares its signatures (pdtui/servers/<engine>/signatures.py); how a role's are chosen, how
the user's own ``fail:`` patterns join them, what an access line looks like and how a table is written into
docs/signatures.md are every engine's alike, so they live here once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pdtui.config.regex import Bounded
from pdtui.vocabulary.signatures import Signature

USER_RANK = 11   # a failure pattern the user wrote is the most telling of all


@dataclass(frozen=True, slots=True)
class SignatureTable:
    """What an engine's log lines mean: a prefill's and a decode's (``server``), its router's, whether a line only
    records an HTTP request answered (``request_line``), and the words of a rank's failure that say another rank
    of its server went first (``peer_lost``: a consequence, not the cause)."""

    server: tuple[Signature, ...]
    router: tuple[Signature, ...]
    request_line: Callable[[str], bool]
    peer_lost: tuple[str, ...] = ()

    def signatures_for(self, role: str, extra: tuple[str, ...] = ()) -> tuple[Signature, ...]:
        """The role's signatures plus the user's own ``fail:`` patterns (fatal)."""
        user = tuple(Signature(Bounded(p), f"matched fail pattern {p!r}", USER_RANK) for p in extra)
        return user + self._of_role(role)

    def _of_role(self, role: str) -> tuple[Signature, ...]:
        if role in ("prefill", "decode"):
            return self.server
        return self.router if role == "router" else ()

    def lost_a_peer(self, reason: str) -> bool:
        """Whether a rank's failure says another rank of its server went first."""
        return any(words in reason for words in self.peer_lost)


_ACCESS_LINE = re.compile(r'"[A-Z]+ \S+ HTTP/[0-9.]+" [0-9]{3}\b')


def access_line(message: str) -> bool:
    """A server's access line (uvicorn's ``"GET /health HTTP/1.1" 200 OK``): one HTTP request answered."""
    return " HTTP/" in message and _ACCESS_LINE.search(message) is not None


def markdown_table(fourth: str, rows: Iterable[tuple[str, Signature, str]]) -> str:
    """A signature table of docs/signatures.md: each row's pattern, meaning and kind, its ``fourth`` column (the
    generation, where the wording comes from) and who prints it, from (who, signature, fourth) rows."""
    lines = [f"| signature (regex) | meaning | kind | {fourth} | who |", "|---|---|---|---|---|"]
    for who, s, told in rows:
        pattern = s.pattern.pattern.replace("|", r"\|")
        lines.append(f"| `{pattern}` | {s.reason} | {s.severity.value} | {told} | {who} |")
    return "\n".join(lines) + "\n"
