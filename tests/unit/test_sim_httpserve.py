"""The sim's shared HTTP server: a client that hung up is no error, anything else still is."""

from __future__ import annotations

import http.client
import threading

import pytest

from pdtui.sim.httpserve import JsonHandler, Server


class Raising(JsonHandler):
    """Fails every GET with the exception its path names."""

    def do_GET(self) -> None:
        raise {"/hung-up": BrokenPipeError, "/bug": ValueError}[self.path]("from the handler")


@pytest.fixture
def server():
    srv = Server(("127.0.0.1", 0), Raising)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)


def get(server: Server, path: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=5)
    try:
        conn.request("GET", path)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            conn.getresponse()
    finally:
        conn.close()


def test_a_client_that_hung_up_leaves_no_traceback(server, capfd):
    get(server, "/hung-up")
    assert "Traceback" not in capfd.readouterr().err


def test_any_other_handler_error_still_prints_its_traceback(server, capfd):
    get(server, "/bug")
    err = capfd.readouterr().err
    assert "Traceback" in err and "ValueError: from the handler" in err
