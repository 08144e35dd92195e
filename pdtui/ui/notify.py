"""Escape sequences that tell an engineer in another pane that the bring-up ended."""

from __future__ import annotations

from pdtui.support.text import make_visible


def osc9(message: str) -> str:
    """An OSC 9 desktop notification (iTerm2, kitty, WezTerm, Windows Terminal, foot...).

    The message is made inert first: a deployment or service name must not be able to
    end the sequence early and smuggle its own escapes.
    """
    return f"\x1b]9;{make_visible(message)}\x07"


def tmux_passthrough(sequence: str) -> str:
    """Wrap ``sequence`` so tmux hands it to the outer terminal (needs ``allow-passthrough on``)."""
    return "\x1bPtmux;" + sequence.replace("\x1b", "\x1b\x1b") + "\x1b\\"


def desktop_notification(message: str, *, in_tmux: bool) -> str:
    """The bytes to write to the terminal for a desktop notification."""
    sequence = osc9(message)
    return tmux_passthrough(sequence) if in_tmux else sequence
