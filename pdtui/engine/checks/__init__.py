"""The active checks, one module each, and the registry of a backend's readiness checks.

A backend (a prefill or a decode) is ready when its readiness line came and
every check of :data:`BACKEND_CHECKS` that applies to it holds, then its
serving engine's own (SGLang's prefill bootstrap server: servers/sglang/),
run in that order, each only once the ones before it hold. A router is ready when its
end-to-end probe (router.py) holds, step by step: port, readiness, workers,
models, then a generation proven by its tokens (generation.py) and by the KV
transfer series (kv_transfer.py).

To add a readiness check: a module here with a class that has a ``name``,
``applies(cfg)`` and ``async run(probed) -> Check`` (the
:class:`~pdtui.vocabulary.checks.ReadinessCheck` protocol, in the vocabulary the
serving engines' own checks share), and its instance in :data:`BACKEND_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pdtui.config import ServiceConfig
from pdtui.engine.checks.http_status import HttpAnswers
from pdtui.engine.checks.tcp import TcpAccepts
from pdtui.vocabulary.checks import ReadinessCheck

BACKEND_CHECKS: tuple[ReadinessCheck, ...] = (TcpAccepts(), HttpAnswers())

__all__ = ["BACKEND_CHECKS", "backend_checks"]


def backend_checks(cfg: ServiceConfig, own: Sequence[ReadinessCheck] = ()) -> tuple[ReadinessCheck, ...]:
    """The readiness checks of this service in their order: the generic ones, then its serving engine's ``own``."""
    return tuple(check for check in (*BACKEND_CHECKS, *own) if check.applies(cfg))
