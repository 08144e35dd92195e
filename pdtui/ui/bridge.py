"""The one place where engine events become Textual messages.

The engine calls subscribers on the event loop's thread, so posting a message is
enough: events reach the app in the order the engine emitted them.
"""

from __future__ import annotations

from textual.message import Message
from textual.message_pump import MessagePump

from pdtui.engine.events import Event, EventSource


class EngineEvent(Message):
    """An engine event delivered to the app."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


def connect(source: EventSource, target: MessagePump) -> None:
    """Forward every event of ``source`` to ``target`` as an :class:`EngineEvent`."""
    def forward(event: Event) -> None:
        target.post_message(EngineEvent(event))

    source.subscribe(forward)
