"""One backoff for everything pdtui tries again: a journal tail, an SSH connection, a host not up yet, nvidia-smi."""

from __future__ import annotations


class Backoff:
    """A delay that doubles after each use up to a ceiling, and starts over after a success."""

    __slots__ = ("ceiling", "delay", "start")

    def __init__(self, start: float = 0.2, ceiling: float = 5.0) -> None:
        self.start = start
        self.ceiling = ceiling
        self.delay = start

    def next(self) -> float:
        """The delay to wait now; the next one is twice as long (at most the ceiling)."""
        current = self.delay
        self.delay = min(current * 2, self.ceiling)
        return current

    def reset(self) -> None:
        """It worked: the next wait is the shortest again."""
        self.delay = self.start
