"""The router lists every configured backend, healthy (``GET /workers``).

sglang-router 0.3 and smg 1.x answer alike but for extra fields (smg's
workers carry ``status`` and ``labels`` beside ``is_healthy``), so the answer
is read by the fields both have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from pdtui.vocabulary.checks import Check


def key_refused(key_env: str | None) -> str:
    """What a router's 401 means: it wants a key pdtui was not given, or refused the one it sent."""
    if key_env:
        return f"the router refused the API key in {key_env}"
    return ("the router requires an API key (its --api-key or --control-plane-api-keys): name the environment "
            "variable that holds it as the router's api_key_env")


@dataclass(frozen=True, slots=True)
class Backend:
    """A prefill or decode service as the router should list it."""

    service: str
    role: str
    port: int
    addresses: frozenset[str]   # host names under which the router may know it


def worker_matches(url: str, backend: Backend) -> bool:
    """Whether a worker URL the router lists is this backend (same port, a name of its host)."""
    address = url_address(url)
    return address is not None and address[1] == backend.port and address[0] in backend.addresses


@lru_cache(maxsize=4096)
def url_address(url: str) -> tuple[str, int | None] | None:
    """A backend URL's host name and port, None when it is no URL: read once per URL (each look at a router's
    workers, and the drift check of its unit, compare every URL it lists with every backend)."""
    try:
        parts = urlsplit(url)
        return parts.hostname or "", parts.port
    except ValueError:
        return None


def listed_workers(payload: object) -> list[dict]:
    """The worker objects of a ``/workers`` answer, tolerant of its shape across versions."""
    if isinstance(payload, dict):
        payload = payload.get("workers", payload.get("data", []))
    return [w for w in payload if isinstance(w, dict)] if isinstance(payload, list) else []


def healthy(worker: dict) -> bool:
    """Whether the router calls this worker healthy (``is_healthy``, ``healthy`` or a ``status`` word)."""
    for key in ("is_healthy", "healthy"):
        if key in worker:
            return bool(worker[key])
    return str(worker.get("status", "healthy")).lower() in ("healthy", "ready", "ok")


def check_workers(payload: object, backends: Sequence[Backend]) -> Check:
    """Every configured backend listed by the router and healthy; name the ones that are not."""
    workers = listed_workers(payload)
    missing, unhealthy = [], []
    for backend in backends:
        found = [w for w in workers if worker_matches(str(w.get("url", "")), backend)]
        if not found:
            missing.append(backend.service)
        elif not any(healthy(w) for w in found):
            unhealthy.append(backend.service)
    problems = ([f"missing: {', '.join(missing)}"] if missing else []) + (
        [f"unhealthy: {', '.join(unhealthy)}"] if unhealthy else [])
    if problems:
        return Check("workers", False, "; ".join(problems))
    return Check("workers", True, f"{len(backends)} of {len(backends)} backends healthy")
