"""Small HTTP/1.1 helpers shared by the sim worker and the sim router (stdlib only).

Both speak keep-alive HTTP/1.1 with a Content-Length on every answer, as the
real servers do, so clients that reuse connections (the router's pool, httpx)
behave as they would in production.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def set_on_signal(event: threading.Event, *signums: int) -> None:
    """Set ``event`` when one of ``signums`` arrives.

    The handler sets it from a new thread: ``Event.set`` takes a lock the
    interrupted main thread may be holding inside ``Event.wait``.
    """
    for signum in signums:
        signal.signal(signum, lambda *_: threading.Thread(target=event.set).start())


class Server(ThreadingHTTPServer):
    """A threading server whose handler threads never keep the process alive."""

    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Let a client that hung up go without a word, as uvicorn and the real router do.

        smg closes its connection to the prefill as soon as the decode leg has failed; the
        stdlib would print a traceback for the answer it could not send, and a traceback in a
        worker's log reads as a failure. Any other error still prints one.
        """
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class JsonHandler(BaseHTTPRequestHandler):
    """Reads JSON bodies and answers with JSON or text, always with Content-Length."""

    protocol_version = "HTTP/1.1"
    # Headers go out a write each: on a kept-alive connection Nagle's algorithm held the next answer
    # until the client's delayed ACK, 40 ms a request. uvicorn sets TCP_NODELAY too.
    disable_nagle_algorithm = True

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def read_json(self) -> Any:
        """The request's JSON body; ValueError if it is not JSON."""
        body = self.read_body()
        return json.loads(body) if body else {}

    def reply(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply_events(self, events: Iterable[Any]) -> None:
        """A server-sent event stream (``data: JSON``, then ``data: [DONE]``), chunked so keep-alive survives.

        Each event goes out as ``events`` yields it: a generation's tokens reach the client as they come.
        """
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self._chunk(b"data: " + json.dumps(event, separators=(",", ":")).encode("utf-8") + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def reply_json(self, status: int, obj: Any) -> None:
        self.reply(status, json.dumps(obj, separators=(",", ":")).encode("utf-8"))

    def reply_text(self, status: int, text: str) -> None:
        self.reply(status, text.encode("utf-8"), "text/plain; charset=utf-8")

    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - stdlib signature
        """Silence the stdlib's stderr log: each server writes its own access lines."""
