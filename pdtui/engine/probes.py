"""The active readiness checks: TCP accept, HTTP status, and the router's end-to-end probe.

Each check returns a :class:`Check` (ok, detail, latency). The router probe is
a sequence that stops at the first step that does not hold: port accepting,
``/readiness`` (``/health`` on routers that have no ``/readiness``), every
configured backend healthy in ``/workers``, a model in ``/v1/models``, and one
tiny chat completion, for the model listed, through the prefill -> decode
path (smg routes by the model; another name is 503). sglang-router 0.3 and
smg 1.x answer all of these alike but for extra fields (smg's workers carry
``status`` and ``labels`` beside ``is_healthy``), so the answers are read by
the fields both have. A router whose ``/workers`` wants an API key fails the
probe for good: pdtui has no key to send.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from pdtui.config import DEFAULT_BOOTSTRAP_PORT
from pdtui.engine.http import HttpProber, HttpResult
from pdtui.hosts.base import LOOPBACK_ADDRESS, Host, HostError

LOOPBACK = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}
SMOKE_PROMPT = "Say OK."
SMOKE_MAX_TOKENS = 4
WORKERS_NEED_KEY = ("HTTP 401 from /workers: the router requires an API key (its --api-key or "
                    "--control-plane-api-keys); pdtui cannot list its workers")


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str = ""
    latency: float | None = None
    final: bool = False      # a failure that waiting will not cure


@dataclass(frozen=True, slots=True)
class Backend:
    """A prefill or decode service as the router should list it."""

    service: str
    role: str
    port: int
    addresses: frozenset[str]   # host names under which the router may know it


async def tcp_check(host: Host, port: int, address: str = LOOPBACK_ADDRESS) -> Check:
    started = time.perf_counter()
    try:
        _, writer = await host.open_tcp(port, timeout=3, address=address)
    except (OSError, HostError) as exc:
        return Check("tcp", False, f"port {port} not accepting ({exc})")
    writer.close()
    return Check("tcp", True, f"port {port} accepting", time.perf_counter() - started)


async def http_check(prober: HttpProber, port: int, path: str, address: str = LOOPBACK_ADDRESS) -> Check:
    result = await prober.get(port, path, address=address)
    return Check(f"http {path}", result.ok, result.describe(), result.latency)


async def bootstrap_port(prober: HttpProber, port: int, address: str = LOOPBACK_ADDRESS) -> int:
    """The bootstrap port a PD prefill says it serves (``/server_info``, ``/get_server_info`` on older
    builds), or SGLang's default when it does not say."""
    for path in ("/server_info", "/get_server_info"):
        result = await prober.get(port, path, address=address)
        info = result.json() if result.ok else None
        if isinstance(info, dict):
            value = info.get("disaggregation_bootstrap_port")
            if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
                return value
            break
    return DEFAULT_BOOTSTRAP_PORT


def worker_matches(url: str, backend: Backend) -> bool:
    """Whether a worker URL the router lists is this backend (same port, a name of its host)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    return port == backend.port and (parts.hostname or "") in backend.addresses


def _workers(payload: object) -> list[dict]:
    """The worker objects of a ``/workers`` answer, tolerant of its shape across versions."""
    if isinstance(payload, dict):
        payload = payload.get("workers", payload.get("data", []))
    return [w for w in payload if isinstance(w, dict)] if isinstance(payload, list) else []


def _healthy(worker: dict) -> bool:
    for key in ("is_healthy", "healthy"):
        if key in worker:
            return bool(worker[key])
    return str(worker.get("status", "healthy")).lower() in ("healthy", "ready", "ok")


def check_workers(payload: object, backends: Sequence[Backend]) -> Check:
    """Every configured backend listed by the router and healthy; name the ones that are not."""
    workers = _workers(payload)
    missing, unhealthy = [], []
    for backend in backends:
        found = [w for w in workers if worker_matches(str(w.get("url", "")), backend)]
        if not found:
            missing.append(backend.service)
        elif not any(_healthy(w) for w in found):
            unhealthy.append(backend.service)
    problems = ([f"missing: {', '.join(missing)}"] if missing else []) + (
        [f"unhealthy: {', '.join(unhealthy)}"] if unhealthy else [])
    if problems:
        return Check("workers", False, "; ".join(problems))
    return Check("workers", True, f"{len(backends)} of {len(backends)} backends healthy")


TransferError = Callable[[float, bool], Awaitable["str | None"]]   # (since, wait) -> a backend's quoted line


class RouterProbe:
    """The router's end-to-end probe, step by step.

    ``transfer_error`` tells whether a backend logged a KV transfer error since
    a moment (of ``clock``): such a line during the smoke request fails that
    step, quoted, whatever the router answered.
    """

    def __init__(self, prober: HttpProber, port: int, backends: Sequence[Backend], *, smoke: bool = True,
                 transfer_error: TransferError | None = None, clock: Callable[[], float] = time.monotonic,
                 address: str = LOOPBACK_ADDRESS) -> None:
        self.prober = prober
        self.port = port
        self.address = address      # where the router listens, as its host sees it (a job: its node's address)
        self.backends = list(backends)
        self.smoke = smoke
        self.smoke_failures = 0
        self.transfer_error = transfer_error
        self.clock = clock
        self._model: str | None = None
        self._transfer_quote: str | None = None

    async def steps(self, host: Host):
        """Yield each step's Check until one fails (that one is yielded last)."""
        for step in (lambda: self._tcp(host), self._readiness, self._workers, self._models):
            check = await step()
            yield check
            if not check.ok:
                return
        if self.smoke and self._model:
            yield await self._smoke(self._model)

    async def _tcp(self, host: Host) -> Check:
        return await tcp_check(host, self.port, self.address)

    async def _get(self, path: str) -> HttpResult:
        return await self.prober.get(self.port, path, address=self.address)

    async def _readiness(self) -> Check:
        result = await self._get("/readiness")
        if result.status == 404:
            # Older routers have no /readiness; their /health reflects the workers.
            result = await self._get("/health")
            return Check("health", result.ok, result.describe(), result.latency)
        return Check("readiness", result.ok, result.describe(), result.latency)

    async def _workers(self) -> Check:
        result = await self._get("/workers")
        if result.status == 401:
            # An API key (--api-key, or control-plane keys) guards /workers; waiting will not change that.
            return Check("workers", False, WORKERS_NEED_KEY, result.latency, final=True)
        if not result.ok:
            return Check("workers", False, result.describe(), result.latency)
        check = check_workers(result.json(), self.backends)
        return Check(check.name, check.ok, check.detail, result.latency)

    async def _models(self) -> Check:
        result = await self._get("/v1/models")
        data = result.json() if result.ok else None
        models = [m.get("id") for m in (data or {}).get("data", []) if isinstance(m, dict)] if isinstance(data, dict) else []
        self._model = next((m for m in models if m), None)
        if not self._model:
            return Check("models", False, result.describe() if not result.ok else "no model listed", result.latency)
        return Check("models", True, self._model, result.latency)

    async def _smoke(self, model: str) -> Check:
        check = await self._generate(model, "smoke")
        if check.ok:
            return check
        self.smoke_failures += 1
        # A generation that fails three times over is not a warm-up hiccup.
        return replace(check, final=self.smoke_failures >= 3)

    async def canary(self) -> Check:
        """After ready: the smoke step's generation once more, judged on its own (a failure is never final)."""
        if self._model is None:
            models = await self._models()
            if not models.ok:
                return Check("canary", False, f"{models.name}: {models.detail}", models.latency)
        assert self._model is not None
        return await self._generate(self._model, "canary")

    async def _generate(self, model: str, name: str) -> Check:
        """One tiny chat completion for ``model``; a backend's KV transfer error meanwhile fails it, quoted."""
        body = {"model": model, "messages": [{"role": "user", "content": SMOKE_PROMPT}],
                "max_tokens": SMOKE_MAX_TOKENS, "temperature": 0}
        started = self.clock()
        result = await self.prober.request("POST", self.port, "/v1/chat/completions", body=body, timeout=30,
                                           address=self.address)
        answer = _answer(result.json()) if result.ok else None
        quoted = await self.transfer_error(started, answer is None) if self.transfer_error else None
        if answer is None or quoted:
            detail = result.describe() if not result.ok else f"no answer in the response: {result.describe()}"
            if quoted:
                self._transfer_quote = quoted
                detail = f"KV transfer error during the request: {quoted}"
            elif self._transfer_quote:   # the router may stop sending to a backend that failed it before
                detail += f" (after a KV transfer error: {self._transfer_quote})"
            return Check(name, False, detail, result.latency)
        return Check(name, True, f"answer {answer!r} in {result.latency * 1000:.0f} ms", result.latency)


def _answer(payload: Any) -> str | None:
    try:
        choice = payload["choices"][0]
        text = choice.get("message", {}).get("content") if "message" in choice else choice.get("text")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return text.strip() if isinstance(text, str) else None
