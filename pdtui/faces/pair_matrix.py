"""A router's prefill × decode pairs as a small matrix of marks: one row per prefill, one column per decode.

``✓`` the pair moved KV (its decode answered with tokens), ``✗`` it did not;
the reasons follow the matrix, one line per failed pair. Every face prints it
the same way (``status --once`` and the TUI's router panel).
"""

from __future__ import annotations

from collections.abc import Sequence

from pdtui.engine.events import PairResult
from pdtui.support.text import inert


def matrix_lines(pairs: Sequence[PairResult], *, reasons: bool = True, width: int = 160) -> list[str]:
    """The matrix (a header of decodes, a row per prefill) and, with ``reasons``, why each failed pair failed."""
    prefills = list(dict.fromkeys(p.prefill for p in pairs))
    decodes = list(dict.fromkeys(p.decode for p in pairs))
    marks = {(p.prefill, p.decode): "✓" if p.ok else "✗" for p in pairs}
    first = max(len("pairs"), *(len(name) for name in prefills))
    widths = [max(len(name), 1) for name in decodes]
    lines = ["pairs".ljust(first) + "  " + "  ".join(name.ljust(w) for name, w in zip(decodes, widths, strict=True))]
    for prefill in prefills:
        cells = (marks.get((prefill, decode), "·").ljust(w) for decode, w in zip(decodes, widths, strict=True))
        lines.append(prefill.ljust(first) + "  " + "  ".join(cells))
    if reasons:
        lines += [inert(f"{p.decode} ✗ {p.prefill}: {p.detail}", width) for p in pairs if not p.ok]
    return [line.rstrip() for line in lines]
