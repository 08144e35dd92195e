"""What a browser session shows before its app starts: the demo's bring-up, line by line, until it is decided.

The ``demo --web`` parent brings the simulated deployment up once; each session
runs ``pdtui status``, which attaches to what runs and starts nothing — one opened
before the router had started would find it stopped, and stay so. A session
therefore waits here, shown the bring-up's lines as they come (the headless
printer's, the same the terminal gets), and its app starts once the bring-up is
decided.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import TextIO


class Preface(io.StringIO):
    """A text stream (what :class:`~pdtui.faces.headless.LinePrinter` writes to) that sessions can follow."""

    def __init__(self, echo: TextIO | None = None) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self._echo = echo
        self._changed = asyncio.Event()
        self._finished = False

    def write(self, text: str) -> int:
        self.chunks.append(text)
        if self._echo is not None:
            self._echo.write(text)
        self._wake()
        return len(text)

    def flush(self) -> None:
        if self._echo is not None:
            self._echo.flush()

    def finish(self) -> None:
        """The bring-up is decided (or abandoned): waiting sessions go on to their app."""
        self._finished = True
        self._wake()

    @property
    def finished(self) -> bool:
        return self._finished

    def _wake(self) -> None:
        """Wake every session waiting for more; the next wait takes a fresh event."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def follow(self, send: Callable[[bytes], Awaitable[object]]) -> None:
        """Send everything written so far, then each new piece, until :meth:`finish`; as terminal text (CRLF)."""
        sent = 0
        while True:
            changed = self._changed
            if sent < len(self.chunks):
                text, sent = "".join(self.chunks[sent:]), len(self.chunks)
                await send(text.replace("\n", "\r\n").encode())
                continue
            if self._finished:
                return
            await changed.wait()
