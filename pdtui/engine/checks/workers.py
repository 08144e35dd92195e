"""The router lists every configured backend, healthy, where requests reach it (``GET /workers``).

sglang-router 0.3 and smg 1.x answer alike but for extra fields (smg's
workers carry ``status``, ``labels`` and ``models`` beside ``is_healthy``), so
the answer is read by the fields both have, and by ``models`` where it is
there: smg sends a request for a model only to a prefill and a decode that
serve it, so a prefill and a decode of two names (two ``--served-model-name``,
or a worker it took as model ``unknown``, its metadata unread) never pair,
both healthy; sglang-router sends any request anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit

from pdtui.vocabulary.checks import Check

UNKNOWN_MODEL = "unknown"   # the model a router lists for a worker whose metadata it could not read
OTHER_ROLE = {"prefill": "decode", "decode": "prefill"}
NEXT_MODEL = ("the router sends a request only to a prefill and a decode of its model: start every server with one "
              "model path or --served-model-name")


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


def routed_models(worker: dict) -> frozenset[str] | None:
    """The models a router sends this worker requests for: smg lists each worker's ``models`` and routes by them;
    None for a router that lists none (sglang-router 0.3: any request goes to any worker)."""
    models = worker.get("models")
    if not isinstance(models, list):
        return None
    return frozenset(str(m["id"]) for m in models if isinstance(m, dict) and m.get("id"))


@dataclass(frozen=True, slots=True)
class Untaken:
    """A configured backend the router does not take: not listed (``missing``), listed ``unhealthy``, or listed
    healthy but ``unpaired``: of a model no worker of the other role serves, so that no request reaches it."""

    backend: Backend
    how: Literal["missing", "unhealthy", "unpaired"]
    worker: dict | None = None      # as the router lists it (None: missing)

    @property
    def url(self) -> str | None:
        """The URL the router lists it under."""
        return str(self.worker["url"]) if self.worker and self.worker.get("url") else None

    @property
    def models(self) -> frozenset[str]:
        return (routed_models(self.worker) or frozenset()) if self.worker else frozenset()

    @property
    def unknown_model(self) -> bool:
        """The router lists it as model ``unknown``: it could not read its metadata when it took it."""
        return self.worker is not None and (self.worker.get("model_id") == UNKNOWN_MODEL
                                            or self.models == {UNKNOWN_MODEL})


@dataclass(frozen=True, slots=True)
class Judged:
    """The configured backends the router does not take, and the models both roles serve (None: the router routes
    any request to any worker)."""

    untaken: list[Untaken]
    paired: frozenset[str] | None


def judge_workers(payload: object, backends: Sequence[Backend]) -> Judged:
    """Each configured backend against the router's ``/workers`` answer."""
    workers = listed_workers(payload)
    untaken: list[Untaken] = []
    taken = []
    for backend in backends:
        found = [w for w in workers if worker_matches(str(w.get("url", "")), backend)]
        well = next((w for w in found if healthy(w)), None)
        if well is not None:
            taken.append((backend, well))
        else:
            untaken.append(Untaken(backend, "unhealthy" if found else "missing", found[0] if found else None))
    served = _served(workers)
    if served is None:
        return Judged(untaken, None)
    for backend, worker in taken:
        others = served.get(OTHER_ROLE.get(backend.role, ""))
        if others and not (routed_models(worker) or frozenset()) & others:   # none at all: they are what lacks
            untaken.append(Untaken(backend, "unpaired", worker))
    return Judged(untaken, served.get("prefill", frozenset()) & served.get("decode", frozenset()))


def _served(workers: list[dict]) -> dict[str, frozenset[str]] | None:
    """The models the router's healthy workers serve, by role; None when it does not route by model."""
    served: dict[str, frozenset[str]] = {}
    for worker in workers:
        if healthy(worker):
            models = routed_models(worker)
            if models is None:
                return None
            role = str(worker.get("worker_type", ""))
            served[role] = served.get(role, frozenset()) | models
    return served


def check_workers(payload: object, backends: Sequence[Backend],
                  why: Callable[[Untaken], str | None] | None = None) -> Check:
    """Every configured backend listed by the router, healthy and of a model the other role serves; name the ones
    that are not, each with ``why`` (what is known of the reason). Final when the router pairs no prefill with any
    decode by model, and why is known: it never reads a worker's model again."""
    judged = judge_workers(payload, backends)
    untaken = judged.untaken
    if not untaken:
        return Check("workers", True, f"{len(backends)} of {len(backends)} backends healthy")
    parts = [f"{how}: {', '.join(names)}" for how in ("missing", "unhealthy")
             if (names := [u.backend.service for u in untaken if u.how == how])]
    unpaired = [u for u in untaken if u.how == "unpaired"]
    if unpaired:
        parts.append("unpaired: " + "; ".join(f"{u.backend.service} serves {_named(u.models)}, which no "
                                              f"{OTHER_ROLE[u.backend.role]} serves" for u in unpaired))
    reasons = {u.backend.service: reason for u in untaken if why is not None and (reason := why(u))}
    parts += [f"{service}: {reason}" for service, reason in reasons.items()]
    if unpaired and not any(u.unknown_model for u in unpaired):
        parts.append(f"next: {NEXT_MODEL}")
    final = (len(unpaired) == len(untaken) and not judged.paired
             and all(u.backend.service in reasons for u in unpaired if u.unknown_model))
    return Check("workers", False, "; ".join(parts), final=final)


def _named(models: frozenset[str]) -> str:
    return ", ".join(f"'{m}'" for m in sorted(models)) or "no model"
