"""A running router's backends, changed through its worker API: listed, taken out, put back, with no restart.

Both routers pdtui runs answer ``GET /workers``, ``POST /workers`` (JSON
``{"url", "worker_type", "bootstrap_port"}``, 202 and the worker's id: the
router registers it in the background, health checks first) and
``DELETE /workers/{id}`` (202). They differ where it matters to a drain
(measured against the real ones, tests/integration/test_router_workers.py):

- sglang-router 0.3 removes a worker at once, and a ``POST`` of a URL it
  lists already answers 202 with that worker's id.
- smg 1.x marks it ``draining`` (``is_healthy`` false) and removes it after
  its drain (5 s); a ``POST`` of a URL it still lists, draining or not, answers
  409 ``WORKER_ALREADY_EXISTS``.

So a backend is out once no router lists it, and is put back only then. A
router with an API key answers 401 without it (the key pdtui sends comes from
the environment variable the router's ``api_key_env`` names); one older than the JSON API (sglang-router
before 0.2) answers 404 or 405: each is one clear :class:`RouterApiError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from pdtui.engine.checks.workers import healthy, key_refused, listed_workers
from pdtui.hosts.http import HttpProber, HttpResult

API_TIMEOUT = 10.0    # seconds for one request of the worker API
GONE_POLL = 0.25      # seconds between looks while a router drains a worker it was told to remove


class RouterApiError(Exception):
    """The router's worker API refused or is absent: one line that says which and why (``status``: its HTTP
    status; None when the router did not answer at all)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class RouterWorker:
    """A backend as a router lists it."""

    id: str
    url: str
    role: str                        # "prefill" or "decode"
    bootstrap_port: int | None
    healthy: bool
    draining: bool

    @classmethod
    def read(cls, worker: dict) -> RouterWorker:
        port = worker.get("bootstrap_port")
        return cls(str(worker.get("id", worker.get("url", ""))), str(worker.get("url", "")),
                   str(worker.get("worker_type", "")), port if isinstance(port, int) else None,
                   healthy(worker), str(worker.get("status", "")).lower() == "draining")

    def body(self) -> dict:
        """What ``POST /workers`` takes to register this backend again."""
        body: dict = {"url": self.url, "worker_type": self.role}
        if self.role == "prefill":
            body["bootstrap_port"] = self.bootstrap_port
        return body


def workers_in(answer: HttpResult) -> list[RouterWorker]:
    """The workers a router's ``GET /workers`` answer lists."""
    return [RouterWorker.read(worker) for worker in listed_workers(answer.json())]


class RouterWorkers:
    """One router's worker API, through the prober of the host it runs on."""

    def __init__(self, name: str, prober: HttpProber, port: int, address: str,
                 clock: Callable[[], float] = time.monotonic, key_env: str | None = None) -> None:
        self.name = name
        self.key_env = key_env
        self._prober = prober
        self._port = port
        self._address = address
        self._clock = clock

    async def listed(self) -> list[RouterWorker]:
        return workers_in(await self.listing())

    async def listing(self) -> HttpResult:
        """``GET /workers`` as the router answered it (200), for a caller that judges the same answer too."""
        return await self._request("GET", "/workers")

    async def remove(self, worker: RouterWorker) -> None:
        """Take ``worker`` out: the router sends it no new request (it may finish what it has: smg drains)."""
        await self._request("DELETE", f"/workers/{quote(worker.id, safe='')}", ok=(200, 202, 204, 404))

    async def add(self, worker: RouterWorker) -> None:
        """Register ``worker`` (again); the router health-checks it before it routes to it. A router that has it
        already (smg's 409) is where it should be."""
        await self._request("POST", "/workers", body=worker.body(), ok=(200, 201, 202, 409))

    async def until_gone(self, url: str, timeout: float) -> bool:
        """Wait until the router lists no worker at ``url`` (its drain is over); False after ``timeout``."""
        deadline = self._clock() + timeout
        while any(worker.url == url for worker in await self.listed()):
            if self._clock() >= deadline:
                return False
            await asyncio.sleep(GONE_POLL)
        return True

    async def _request(self, method: str, path: str, *, body: object = None,
                       ok: tuple[int, ...] = (200,)) -> HttpResult:
        result = await self._prober.request(method, self._port, path, body=body, timeout=API_TIMEOUT,
                                            address=self._address)
        if result.status in ok:
            return result
        raise RouterApiError(self._refusal(method, path, result), result.status)

    def _refusal(self, method: str, path: str, result: HttpResult) -> str:
        where = f"{self.name}: {method} {path}"
        if result.status == 401:
            return f"{where} answered 401: {key_refused(self.key_env)}"
        if result.status in (404, 405) and path == "/workers":
            return (f"{where} answered {result.status}: this router has no worker API (sglang-router 0.2 or later, or "
                    "smg, changes its backends while it runs)")
        return f"{where}: {result.describe()}"
