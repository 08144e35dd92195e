"""A drain against a router's worker API, in milliseconds: a router faked at the HTTP level, as sglang-router 0.3
answers (a removed worker gone at once, the URL its id)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from urllib.parse import unquote

from pdtui.engine.drain import Drain
from pdtui.hosts.http import HttpResult


@dataclass
class WorkerApi:
    """A router's ``/workers`` routes over a dict of URL → worker; every request kept."""

    workers: dict[str, dict] = field(default_factory=dict)
    asked: list[tuple[str, str]] = field(default_factory=list)

    async def request(self, method: str, port: int, path: str, *, body=None, timeout=5.0, address="127.0.0.1"):
        self.asked.append((method, path))
        if method == "GET" and path == "/workers":
            return self._answer(200, {"workers": list(self.workers.values())})
        if method == "DELETE":
            self.workers.pop(unquote(path.removeprefix("/workers/")), None)
            return self._answer(202, {})
        if method == "POST" and path == "/workers":
            self.workers[body["url"]] = {**body, "id": body["url"], "is_healthy": True}
            return self._answer(202, {"worker_id": body["url"]})
        return self._answer(404, {})

    async def get(self, port: int, path: str, **options):
        return await self.request("GET", port, path, **options)

    @staticmethod
    def _answer(status: int, payload: dict) -> HttpResult:
        return HttpResult(status, json.dumps(payload).encode(), 0.001)


def router(api: WorkerApi) -> SimpleNamespace:
    return SimpleNamespace(name="router", prober=api, address="127.0.0.1",
                           cfg=SimpleNamespace(port=30001, api_key_env=None))


class Job:
    """A decode job: where Slurm placed it is its URL, and a restart may place it elsewhere."""

    def __init__(self, node: str) -> None:
        self.name, self.node = "decode", node
        self.cfg = SimpleNamespace(role="decode", port=30002)

    def names_for(self, router_cfg) -> frozenset[str]:
        return frozenset({self.node})

    def url_for(self, router_cfg) -> str:
        return f"http://{self.node}:30002"


async def test_a_job_restarted_on_another_node_goes_back_in_under_its_new_url_and_the_old_one_stays_out():
    api = WorkerApi({"http://10.0.0.7:30002": {"id": "http://10.0.0.7:30002", "url": "http://10.0.0.7:30002",
                                                "worker_type": "decode", "is_healthy": True}})
    job = Job("10.0.0.7")
    drain = Drain(job, [router(api)], timeout=5.0, clock=lambda: 0.0)
    await drain.take_out()
    assert api.workers == {}
    job.node = "10.0.0.9"       # its restart: Slurm placed it on another node
    await drain.put_back()
    assert list(api.workers) == ["http://10.0.0.9:30002"]
    assert ("DELETE", "/workers/http%3A%2F%2F10.0.0.7%3A30002") in api.asked
    told = drain.told("back", 12.0)
    assert (told.service, told.outcome, told.out_for) == ("decode", "back", 0.0)
