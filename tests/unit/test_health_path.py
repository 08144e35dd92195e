"""A server's health is asked where it costs the server least: SGLang's ``/ready`` in place of its generating
``/health`` while the release serves it, the configured path once it says it lacks it (checks/http_status.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pdtui.engine.checks.http_status import health_check
from pdtui.hosts.http import HttpResult
from pdtui.servers import serving_named
from pdtui.vocabulary.checks import Learned


class Prober:
    """Answers each GET by its path (without pdtui's mark), 404 for a path it does not serve; keeps what was asked."""

    def __init__(self, answers: dict[str, int]) -> None:
        self.answers, self.asked = answers, []

    async def get(self, port: int, path: str, *, address: str) -> HttpResult:
        self.asked.append(path.partition("?")[0])
        return HttpResult(self.answers.get(path.partition("?")[0], 404), b"", 0.001)


def probed(engine: str, answers: dict[str, int], path: str = "/health") -> SimpleNamespace:
    cfg = SimpleNamespace(port=30000, ready=SimpleNamespace(http=path), is_router=False)
    return SimpleNamespace(cfg=cfg, prober=Prober(answers), address="127.0.0.1",
                           learned=Learned(health_path=serving_named(engine).health_path(path)))


async def test_a_server_that_serves_ready_is_asked_there_and_never_at_its_generating_health():
    server = probed("sglang", {"/ready": 200, "/health": 200})
    checks = [await health_check(server), await health_check(server)]     # type: ignore[arg-type]
    assert [(c.name, c.ok) for c in checks] == [("http /ready", True)] * 2
    assert server.prober.asked == ["/ready", "/ready"]


async def test_ready_answering_503_is_not_ready_and_health_is_not_asked_instead():
    server = probed("sglang", {"/ready": 503, "/health": 200})     # a failed warm-up: /health would say 200
    check = await health_check(server)     # type: ignore[arg-type]
    assert (check.name, check.ok, check.detail) == ("http /ready", False, "HTTP 503")
    assert server.prober.asked == ["/ready"]


async def test_a_release_without_ready_is_asked_its_health_from_its_first_404_on():
    server = probed("sglang", {"/health": 200})
    checks = [await health_check(server), await health_check(server)]     # type: ignore[arg-type]
    assert [(c.name, c.ok) for c in checks] == [("http /health", True)] * 2
    assert server.prober.asked == ["/ready", "/health", "/health"]


@pytest.mark.parametrize(("engine", "path"), [("vllm", "/health"), ("sglang", "/v1/models")])
async def test_an_engine_without_another_answer_or_another_configured_path_is_asked_as_configured(engine, path):
    server = probed(engine, {path: 200, "/ready": 200}, path)
    assert (await health_check(server)).name == f"http {path}"     # type: ignore[arg-type]
    assert server.prober.asked == [path]
