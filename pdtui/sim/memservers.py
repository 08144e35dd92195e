"""The memory hosts' servers (pdtui/sim/memhost.py): what each SGLang backend and router logs as it starts, and what
it answers over HTTP.

Each backend logs SGLang's start-up in the current generation's wording
(:mod:`pdtui.sim.wording`) spread over its start-up time: the bootstrap server
up, HTTP accepting at "Uvicorn running", ``/health`` 200 after the warm-up, then
the ready line, judged by the engine's real readiness judge. A router is ready
``router_startup`` seconds after its start, once every backend it lists is
healthy; it logs one "Activated 1 worker(s)" line per backend then. Its HTTP
routes (``/readiness``, ``/workers``, ``/v1/chat/completions``) answer as
sglang-router's; a backend's (``/health``, ``/server_info``, ``/generate``) as SGLang's, a decode of a broken
pair failing its KV transfer. The host plays the scripts (:meth:`MemoryHost._play`) and carries the requests.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING
from urllib.parse import unquote

import orjson

from pdtui.config import ServiceConfig
from pdtui.sim.knobs import DEFAULT_MODEL
from pdtui.sim.wording import WORDINGS
from pdtui.sim.worker import oom_traceback, server_args_repr
from pdtui.targets.systemd.settings import hosts_of, unit_service

if TYPE_CHECKING:
    from pdtui.sim.memhost import MemoryHost

WORDING = WORDINGS["current"]
READY_LINE = "The server is fired up and ready to roll!"


_clock: list = [0, ""]      # the second last stamped, and its text


def stamp(rank: str = "") -> str:
    """SGLang's time stamp, made once a second (a fleet logs thousands of lines in one)."""
    now = int(time.time())
    if now != _clock[0]:
        _clock[:] = [now, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))]
    return f"[{_clock[1]}{rank}]"


@dataclass
class MemoryService:
    """One unit of a memory host: its config, its start-up time and how far its current run got."""

    cfg: ServiceConfig
    startup: float
    active: str = "inactive"
    invocation: str = ""
    pid: int = 0
    listening: bool = False          # the HTTP port accepts
    bootstrap_up: bool = False       # a prefill's bootstrap port accepts
    healthy: bool = False            # /health (a router: /readiness) answers 200
    exit_status: int = 0             # how its last run ended (ExecMainStatus)
    started_at: float | None = None  # time.perf_counter() of the current run's start
    ready_at: float | None = None    # ... and of its ready line (a router: its workers activated)
    timer: asyncio.TimerHandle | None = None     # the next step of its start-up script
    removed: set[str] = field(default_factory=set)   # a router: its workers taken out (DELETE /workers/{id}), by URL

    @property
    def unit(self) -> str:
        unit = unit_service(self.cfg).unit
        assert unit is not None, "the fleet's services are units"
        return unit

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.active, self.listening, self.bootstrap_up, self.healthy, self.pid = "inactive", False, False, False, 0


@lru_cache(maxsize=256)
def _server_args(role: str, port: int, bootstrap: int, gpus: tuple[int, ...]) -> str:
    """SGLang's first line (several KB): made once per shape, as every host of a fleet has the same services."""
    args = argparse.Namespace(model=DEFAULT_MODEL, host="127.0.0.1", port=port, role=role, bootstrap_port=bootstrap,
                              ib_device=None, transfer_backend="mooncake", enable_metrics=True, max_running_requests=None,
                              page_size=64, kv_cache_dtype="auto", revision=None, attention_backend="flashmla",
                              disable_cuda_graph=False)
    return f"server_args={server_args_repr(args, list(gpus) or [0])}"


Step = tuple[float, str, str]
"""One step of a start-up script: (fraction of the start-up time, what, its text). What: ``log``, ``log TP0``
(a line of rank TP0), ``raw`` (a line with no time stamp: a traceback's), ``log pid`` (the text's ``{pid}`` is
the process's), ``set`` (the text names a flag of :class:`MemoryService` that turns true), ``ready``,
``activate`` (a router's workers, a line each), ``exit`` (the process ends with the text's status: the unit
fails)."""

FAILURES = {
    "oom": "CUDA out of memory during CUDA graph capture (a scheduler's traceback), then the process exits 1",
    "crash": "a traceback no signature knows, then the process exits 1",
    "hang": "silence once CUDA graph capture began: never ready",
    "mooncake": "two ranks' scheduler tracebacks, the cause (Mooncake's memory registration) a second after the "
                "headers, then the process exits 1",
    "silent-crash": "a scheduler's traceback header and nothing more: the process hangs",
    "watchdog": "stuck in CUDA graph capture: the scheduler's watchdog fires and SGLang dumps its stacks",
}
"""What a memory backend can be told to do instead of getting ready (``MemoryFleet(failures=...)``)."""


@lru_cache(maxsize=256)
def _backend_steps(role: str, port: int, bootstrap: int, gpus: tuple[int, ...]) -> tuple[Step, ...]:
    """SGLang's start-up, as :mod:`pdtui.sim.worker` plays it: made once per shape, as every host of a fleet
    has the same services."""
    steps: list[Step] = [
        (0.0, "log", _server_args(role, port, bootstrap, gpus)),
        (0.12, "log TP0", "Load weight begin. avail mem=137.34 GB"),
        (0.40, "log TP0", "Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, avail mem=71.08 GB, "
                          "mem usage=66.26 GB."),
        (0.45, "log TP0", "KV Cache is allocated. #tokens: 834615, K size: 24.12 GB, V size: 24.12 GB"),
        (0.46, "log TP0", "Memory pool end. avail mem=14.61 GB")]
    if role == "prefill" and WORDING.bootstrap_started:
        steps += [(0.46, "set", "bootstrap_up"),
                  (0.46, "log TP0", WORDING.bootstrap_started.format(host="127.0.0.1", port=bootstrap))]
    steps += [(0.50, "log TP0", WORDING.graph_begin), (0.75, "log", WORDING.graph_end),
              (0.80, "log pid", "INFO:     Started server process [{pid}]"),
              (0.80, "log", "INFO:     Waiting for application startup."),
              (0.80, "log", "INFO:     Application startup complete."),
              (0.80, "set", "listening"),
              (0.80, "log", f"INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)"),
              (0.84, "log", WORDING.warmup_start),
              (0.98, "log", 'INFO:     127.0.0.1:40002 - "POST /generate HTTP/1.1" 200 OK'),
              *((0.98, "log", line) for line in WORDING.warmup_ok),
              (0.98, "set", "healthy"),
              (1.0, "log", READY_LINE), (1.0, "ready", "")]
    return tuple(steps)


@lru_cache(maxsize=64)
def _failing_steps(kind: str, role: str, port: int, bootstrap: int, gpus: tuple[int, ...]) -> tuple[Step, ...]:
    """SGLang's start-up cut short by one of :data:`FAILURES`."""
    steps = _backend_steps(role, port, bootstrap, gpus)
    if kind == "hang":
        return tuple(step for step in steps if step[0] <= 0.50)
    if kind == "oom":
        header, *rest = oom_traceback(gpus[0] if gpus else 0)
        tail: list[Step] = [(0.6, "log TP0", header), *((0.6, "raw", line) for line in rest if line)]
        return (*(step for step in steps if step[0] <= 0.5), *tail, (0.6, "log", WORDING.sigquit), (0.6, "exit", "1"))
    if kind == "mooncake":
        frames = ['  File "/opt/sglang/srt/managers/scheduler.py", line 2712, in run_scheduler_process',
                  '  File "/opt/sglang/srt/disaggregation/mooncake/conn.py", line 188, in register_buffer_to_engine']
        crash: list[Step] = [(0.47, "log TP0", "Scheduler hit an exception: Traceback (most recent call last):"),
                             (0.47, "log TP1", "Scheduler hit an exception: Traceback (most recent call last):"),
                             *((0.47, "raw", line) for line in frames),
                             (0.485, "raw", "RuntimeError: Mooncake memory registration failed."),
                             (0.485, "raw", "RuntimeError: Mooncake memory registration failed."),
                             (0.49, "log", WORDING.sigquit), (0.49, "exit", "1")]
        return (*(step for step in steps if step[0] <= 0.46), *crash)
    if kind == "watchdog":
        return (*(step for step in steps if step[0] <= 0.50),
                (0.7, "log TP0", "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)"),
                (0.7, "log TP0", "Pyspy dump for PID 4242:"), (0.7, "raw", "Thread 4242 (active): \"MainThread\""))
    if kind == "silent-crash":
        return (*(step for step in steps if step[0] <= 0.46),
                (0.47, "log TP3", "Scheduler hit an exception: Traceback (most recent call last):"))
    if kind == "crash":
        lines = ["Traceback (most recent call last):", '  File "/opt/sglang/srt/entrypoints/engine.py", line 731, '
                 "in _launch_subprocesses", "RuntimeError: an error no signature knows"]
        return (*(step for step in steps if step[0] <= 0.46), (0.47, "log", lines[0]),
                *((0.47, "raw", line) for line in lines[1:]),
                (0.47, "exit", "1"))
    raise ValueError(f"no such failure {kind!r}: one of {', '.join(FAILURES)}")


@lru_cache(maxsize=64)
def _router_steps(port: int) -> tuple[Step, ...]:
    """A router: listening at once, its workers activated (and so ready) at the end of its start-up."""
    return ((0.0, "log", f"INFO smg::server: Starting router on 127.0.0.1:{port} | mode: PD | policy: RoundRobin"),
            (0.0, "set", "listening"),
            (1.0, "activate", "INFO smg::core::steps::worker::shared::activate: Activated 1 worker(s) (marked as healthy)"))


def start_script(service: MemoryService, failure: str | None) -> tuple[Step, ...]:
    """The steps a start of ``service`` plays: a router's, a backend's start-up, or one cut short by ``failure``."""
    cfg = service.cfg
    if cfg.role == "router":
        return _router_steps(cfg.port or 0)
    if failure is not None:
        return _failing_steps(failure, cfg.role, cfg.port or 0, bootstrap_of(service), cfg.gpus)
    return _backend_steps(cfg.role, cfg.port or 0, bootstrap_of(service), cfg.gpus)


def bootstrap_of(service: MemoryService) -> int:
    """A prefill's bootstrap port (SGLang's default when its config names none)."""
    return service.cfg.bootstrap_port or 8998


def _json(status: int, value: object) -> tuple[int, bytes]:
    return status, orjson.dumps(value)


def answer(host: MemoryHost, service: MemoryService, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    """What a server of ``host`` answers to one HTTP request: a backend as SGLang does, a router as sglang-router."""
    path = path.partition("?")[0]
    if service.cfg.role == "router":
        return _router_http(host, service, method, path, body)
    if path in ("/health", "/ready"):      # 0.5.23's /ready: the same here, where every warm-up succeeds
        return (200, b"") if service.healthy else (503, b"")
    if path in ("/server_info", "/get_server_info"):
        return _json(200, {"disaggregation_mode": service.cfg.role, "tp_size": len(service.cfg.gpus) or 1,
                           "disaggregation_bootstrap_port": bootstrap_of(service)})
    if path == "/v1/models":
        return _json(200, {"object": "list", "data": [{"id": DEFAULT_MODEL, "object": "model"}]})
    if method == "POST" and path == "/generate":
        return _pd_generate(host, service, orjson.loads(body or b"{}"))
    return 404, b'{"detail":"Not Found"}'


def _pd_generate(host: MemoryHost, service: MemoryService, request: dict) -> tuple[int, bytes]:
    """SGLang's PD request: the prefill answers once its KV has gone, the decode with the tokens; a decode of a
    broken pair logs SGLang's transfer error and answers 500."""
    prompt = len(str(request.get("text", "")).split())
    room = request.get("bootstrap_room")
    if service.cfg.role == "decode":
        prefill = next((name for name, other in host.fleet.services.items() if other.cfg.role == "prefill"
                        and (other.cfg.bootstrap_port or 8998) == request.get("bootstrap_port")), None)
        if prefill is not None and (prefill, service.cfg.name) in host.fleet.broken_pairs:
            host.log(service, f"Decode transfer failed for request rank=0 decode_req.req.rid='memory' "
                               f"decode_req.req.bootstrap_room={room} with exception KVTransferError("
                               f"bootstrap_room={room}): Failed to get kvcache from prefill instance, it might "
                               f"be dead", " TP0")
            return _json(500, {"object": "error", "message": "KV transfer failed for request memory",
                               "type": "InternalServerError", "param": None, "code": 500})
    tokens = 4 if service.cfg.role == "decode" else 1
    return _json(200, {"text": " OK" if tokens > 1 else "",
                       "meta_info": {"finish_reason": {"type": "length", "length": tokens},
                                     "prompt_tokens": prompt, "completion_tokens": tokens}})


def router_workers(host: MemoryHost, router: MemoryService) -> list[tuple[str, MemoryService]]:
    """The router's backends as it lists them: (URL, service)."""
    found = []
    for name in router.cfg.after:
        backend = host.fleet.services[name]
        if backend.cfg.role in ("prefill", "decode"):
            address = "127.0.0.1" if backend.cfg.host == host.name else hosts_of(host.fleet.deployment)[backend.cfg.host].address
            found.append((f"http://{address}:{backend.cfg.port}", backend))
    return found


def _router_http(host: MemoryHost, router: MemoryService, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    """The router's routes; its worker API as sglang-router 0.3's (a removed worker is gone at once, the id is
    the URL)."""
    workers = [(url, b) for url, b in router_workers(host, router) if url not in router.removed]
    roles = {b.cfg.role for _, b in workers}
    ready = router.healthy and all(b.healthy for _, b in workers) and roles == {"prefill", "decode"}
    if path in ("/readiness", "/health"):
        return _json(200 if ready else 503, {"status": "ready" if ready else "not ready"})
    if path == "/workers" and method == "POST":
        url = str(orjson.loads(body or b"{}").get("url", ""))
        router.removed.discard(url)
        return _json(202, {"status": "accepted", "worker_id": url, "url": url})
    if path.startswith("/workers/") and method == "DELETE":
        url = unquote(path.removeprefix("/workers/"))
        if not any(url == listed for listed, _ in workers):
            return _json(404, {"error": f"Worker {url} not found", "code": "WORKER_NOT_FOUND"})
        router.removed.add(url)
        return _json(202, {"status": "accepted", "worker_id": url})
    if path == "/workers":
        return _json(200, {"workers": [{"id": url, "url": url, "worker_type": b.cfg.role,
                                        "is_healthy": router.healthy and b.healthy,
                                        **({"bootstrap_port": bootstrap_of(b)} if b.cfg.role == "prefill" else {})}
                                       for url, b in workers], "total": len(workers)})
    if path == "/v1/models":
        return _json(200, {"object": "list", "data": [{"id": DEFAULT_MODEL, "object": "model"}]})
    if method == "POST" and path == "/v1/chat/completions":
        if not ready:
            return _json(503, {"error": "no healthy workers"})
        return _json(200, {"id": "chatcmpl-memory", "object": "chat.completion", "model": DEFAULT_MODEL,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"},
                                        "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}})
    return 404, b'{"detail":"Not Found"}'
