"""Text that goes into a file pdtui generates (a systemd unit, a Slurm job script): one line stays one line.

Both kinds of file are read line by line, and a line is a directive (systemd) or a command (bash): a newline inside
a value would end its line, and what follows would be read as a line of its own. The config refuses control
characters at load; the writers check again here, so a value from anywhere else cannot change a file's structure.
"""

from __future__ import annotations

from collections.abc import Iterable

from pdtui.support.text import inert


def comment_text(text: str) -> str:
    """``text`` safe inside a comment line: every control character shown as a picture (a newline would end the
    comment, and the rest of the text would be a line of its own)."""
    return inert(text)


def one_line(service: str, key: str, value: str) -> str:
    """``value`` as it is, when it is printable text; a ValueError naming the service and the key otherwise."""
    if not value.isprintable():
        raise ValueError(f"service {service}: {key} holds a control character ({value!r}); a generated file "
                         "takes printable text only")
    return value


def one_line_each(service: str, key: str, values: Iterable[str]) -> list[str]:
    """Every value of ``values`` checked by :func:`one_line`."""
    return [one_line(service, key, value) for value in values]
