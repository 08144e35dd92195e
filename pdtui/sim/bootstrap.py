"""The prefill's KV bootstrap server, as SGLang runs it in PD mode, and the decode's look-up in it.

Decode asks it where the prefill's ranks are (``GET /route``); the prefill's
ranks register with it (``PUT /route``). The sim answers both plainly: what
matters to pdtui is that its port accepts, and what the worker logs when it
cannot bind.

A decode asks a prefill's bootstrap server before it takes the first request
from that prefill, and keeps the answer (:class:`PrefillInfo`): a decode that
cannot reach it fails every request from that prefill, a broken PD pair.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Collection
from typing import Any

from pdtui.sim.httpserve import JsonHandler, Server

# SGLang's /health generate (and its PD warm-up) name this host: no KV moves, so no look-up happens.
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
FETCH_TIMEOUT = 2.0
ROUTE_QUERY = "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1"   # 0.5.23's


class _Handler(JsonHandler):
    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/route":
            self.reply_json(200, {"prefill_parallel_info": {"tp_size": 1, "dp_size": 1, "pp_size": 1}})
        else:
            self.reply_json(404, {"detail": "Not Found"})

    def do_PUT(self) -> None:
        self.read_body()
        self.reply_text(200, "OK")


class BootstrapServer(Server):
    def __init__(self, host: str, port: int) -> None:
        super().__init__((host, port), _Handler)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class BootstrapUnreachable(Exception):
    """The prefill's parallel info could not be had; its text is the line SGLang's decode logs about it."""


def _fetch_error(reason: str) -> BootstrapUnreachable:
    """A look-up that raised (``reason`` in ``requests``' words)."""
    return BootstrapUnreachable(f"Error fetching prefill parallel info from bootstrap: {reason}")


def fetch_parallel_info(host: str, port: int, timeout: float = FETCH_TIMEOUT) -> dict[str, Any]:
    """``GET /route`` on a prefill's bootstrap server, as SGLang's decode asks it (with ``requests``).

    BootstrapUnreachable when nothing answers within ``timeout`` or the answer is not a 200 with a JSON object.
    """
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        status, body = _get(conn, host, port, timeout)
    finally:
        conn.close()
    if status != 200:
        raise BootstrapUnreachable(f"Failed to get prefill server info: {status}, {body.decode('utf-8', 'replace')}")
    try:
        info = json.loads(body)
    except ValueError as exc:
        raise _fetch_error(str(exc)) from None
    if not isinstance(info, dict):
        raise _fetch_error(f"not a JSON object: {body[:80]!r}")
    return info


def _get(conn: http.client.HTTPConnection, host: str, port: int, timeout: float) -> tuple[int, bytes]:
    """The look-up's status and body; a connection that fails or times out in ``requests``' words."""
    pool = f"HTTPConnectionPool(host='{host}', port={port})"
    try:
        conn.connect()
    except TimeoutError:
        raise _fetch_error(f"{pool}: Max retries exceeded with url: {ROUTE_QUERY} (Caused by "
                                   f"ConnectTimeoutError(<urllib3.connection.HTTPConnection object>, 'Connection to "
                                   f"{host} timed out. (connect timeout={timeout:g})'))") from None
    except OSError as exc:
        raise _fetch_error(_connection_error(host, port, exc)) from None
    try:
        conn.request("GET", ROUTE_QUERY)
        response = conn.getresponse()
        return response.status, response.read()
    except TimeoutError:
        raise _fetch_error(f"{pool}: Read timed out. (read timeout={timeout:g})") from None
    except OSError as exc:
        raise _fetch_error(f"('Connection aborted.', {exc!r})") from None


def refused(host: str, port: int) -> BootstrapUnreachable:
    """A look-up whose connection is refused (a port nobody listens on, a firewall that rejects)."""
    return _fetch_error(_connection_error(host, port, ConnectionRefusedError(111, "Connection refused")))


def _connection_error(host: str, port: int, exc: OSError) -> str:
    reason = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno is not None else str(exc)
    return (f"HTTPConnectionPool(host='{host}', port={port}): Max retries exceeded with url: {ROUTE_QUERY} "
            f"(Caused by NewConnectionError('<urllib3.connection.HTTPConnection object>: Failed to establish a new "
            f"connection: {reason}'))")


class PrefillInfo:
    """What a decode knows of the prefills that send it requests: each bootstrap address's parallel info.

    Fetched on the first request from an address and kept for the worker's life, as SGLang's decode keeps it;
    a failed fetch is not kept, so the next request from that address asks again. Ports in ``unreachable`` are
    refused without a try, as a firewall between the two nodes would refuse them.
    """

    def __init__(self, unreachable: Collection[int] = (),
                 fetch: Callable[[str, int], dict[str, Any]] = fetch_parallel_info) -> None:
        self.unreachable = frozenset(unreachable)
        self._fetch = fetch
        self._known: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def ensure(self, host: str, port: int) -> dict[str, Any]:
        """The parallel info of the prefill at ``host:port``; BootstrapUnreachable when it cannot be had.

        Requests from one address wait for its one look-up; those from other addresses do not.
        """
        addr = f"{host}:{port}"
        with self._guard:
            lock = self._locks.setdefault(addr, threading.Lock())
        with lock:
            if addr not in self._known:
                if port in self.unreachable:
                    raise refused(host, port)
                self._known[addr] = self._fetch(host, port)
            return self._known[addr]
