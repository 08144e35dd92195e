"""``python -m pdtui.sim.router --pd-disaggregation --prefill URL [BOOTSTRAP] --decode URL ...``.

A stand-in for ``sglang_router.launch_router`` in PD mode, used by the demo
when no real router (``smg``, ``sglang-router``) is installed, or when asked
to.  It behaves as the real one does where pdtui looks (checked against
sglang-router 0.3.2; tests/integration/test_sim_router.py holds for smg 1.13 as well): it
binds at once and registers workers in the background once their ``/health``
answers 200 within 5 s, reading their ``/server_info`` and ``/model_info``
within 10 s, three tries: a worker whose metadata times out each time is given
up ("Workflow deadlocked", sglang-router's words) and never listed; a listed
worker whose ``/health`` fails three times is listed unhealthy, with the
health checker's line; ``/health`` is always 200 ``OK``; ``/readiness`` is 200 only with
a healthy prefill and decode; ``/workers`` has the real shape; a generation
request goes to a prefill and a decode with ``bootstrap_host``/
``bootstrap_port``/``bootstrap_room`` added and the decode's answer comes
back; ``/get_model_info`` is the first prefill's, ``/get_server_info`` the
router's own.  With ``--api-key KEY``, ``/workers`` and the generation routes
answer 401 (empty body) without ``Authorization: Bearer KEY``, as the real
router's do.  Its log lines copy the router's format, ANSI colours included.
Other router flags are accepted and ignored.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pdtui.sim.httpserve import JsonHandler, Server, set_on_signal

POLL_INTERVAL = 0.5
FAILURE_THRESHOLD = 3
HEALTH_TIMEOUT = 5.0        # the real routers' --health-check-timeout-secs
METADATA_TIMEOUT = 10.0     # their metadata step's limit
METADATA_TRIES = 3          # ... and its tries, a second apart
RETRY_DELAY = 1.0
EVENT = "smg::workflow::event"
PROXY_TIMEOUT = 60.0
PROXIED_GETS = ("/get_model_info",)
GENERATE_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
KEYED_PATHS = ("/workers", *GENERATE_PATHS)   # what the real router's --api-key guards; /health and the like stay open
DIM, GREEN, YELLOW, RED, BOLD, ITALIC, RESET = (f"\x1b[{c}m" for c in ("2", "32", "33", "31", "1", "3", "0"))
LEVELS = {"INFO": GREEN, "WARN": YELLOW, "ERROR": RED}


class RouterLog:
    """The router's tracing format: ``DATE TIME  LEVEL target: file:line: message``, coloured."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def line(self, level: str, target: str, where: str, message: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        text = (f"{DIM}{stamp}{RESET} {LEVELS[level]}{level:>5}{RESET} {DIM}{target}{RESET}{DIM}:{RESET} "
                f"{DIM}src/{where}{RESET}{DIM}:{RESET} {message}\n")
        with self.lock:
            sys.stdout.write(text)
            sys.stdout.flush()

    def info(self, target: str, where: str, message: str) -> None:
        self.line("INFO", target, where, message)

    def request(self, method: str, uri: str, request_id: str, status: int | None, latency_us: int = 0) -> None:
        """The two lines the router logs per request (started / finished or failed)."""
        span = f'{BOLD}http_request{{{RESET}{ITALIC}method{RESET}={method} {ITALIC}uri{RESET}={uri} ' \
               f'{ITALIC}version{RESET}=HTTP/1.1 {ITALIC}request_id{RESET}="{request_id}"'
        if status is None:
            self.line("INFO", f"{span}{BOLD}}}{RESET}: smg::request", "middleware.rs:310", "started processing request")
            return
        span += f" {ITALIC}status_code{RESET}={status} {ITALIC}latency{RESET}={latency_us}{BOLD}}}{RESET}: smg::response"
        if status >= 500:
            self.line("ERROR", span, "middleware.rs:349", "request failed with server error")
        else:
            self.line("INFO", span, "middleware.rs:359", "finished processing request")


@dataclass
class Worker:
    url: str
    kind: str                           # "prefill" | "decode"
    bootstrap_port: int | None = None
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    registered: bool = False
    registering: bool = False           # its registration workflow runs
    abandoned: bool = False             # its registration gave up: never listed (until it is added again)
    healthy: bool = False
    failures: int = 0
    model_id: str = "unknown"
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    def as_json(self) -> dict[str, Any]:
        info: dict[str, Any] = {"id": self.id, "url": self.url, "model_id": self.model_id, "priority": 50,
                                "cost": 1.0, "worker_type": self.kind, "is_healthy": self.healthy, "load": 0,
                                "connection_mode": "HTTP"}
        if self.kind == "prefill":
            info["bootstrap_port"] = self.bootstrap_port
        info.update(metadata=self.metadata, disable_health_check=False)
        return info


def fetch(url: str, method: str = "GET", body: bytes | None = None,
          timeout: float = 2.0) -> tuple[int, bytes, str]:
    """One HTTP request: (status, body, content type). OSError if the worker is unreachable."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, parts.path or "/", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader("Content-Type", "application/json")
    except http.client.HTTPException as exc:
        raise OSError(str(exc)) from exc
    finally:
        conn.close()


class Pool:
    """The workers, registered and health-checked in a background thread."""

    def __init__(self, workers: list[Worker], log: RouterLog) -> None:
        self.workers = workers
        self.log = log
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self._next = 0

    def registered(self) -> list[Worker]:
        with self.lock:
            return [w for w in self.workers if w.registered]

    def healthy(self, kind: str) -> list[Worker]:
        with self.lock:
            return [w for w in self.workers if w.registered and w.healthy and w.kind == kind]

    def pick(self) -> tuple[Worker, Worker] | None:
        """A prefill and a decode, round robin over every pair of the healthy ones.

        The real routers pick each side on its own, so any prefill meets any decode: stepping both sides together
        would pair two prefills and two decodes the same way every time, and a broken pair would never be met.
        """
        prefills, decodes = self.healthy("prefill"), self.healthy("decode")
        if not prefills or not decodes:
            return None
        with self.lock:
            self._next += 1
            n = self._next
        return prefills[n % len(prefills)], decodes[n // len(prefills) % len(decodes)]

    def add(self, url: str, kind: str, bootstrap_port: int | None) -> Worker:
        """A worker the API adds (``POST /workers``): registered once its health check passes. A URL it has
        already is that worker (sglang-router 0.3's answer)."""
        with self.lock:
            known = next((w for w in self.workers if w.url == url), None)
            if known is None:
                known = Worker(url, kind, bootstrap_port)
                self.workers.append(known)
            known.abandoned = False             # a new registration workflow for it
            return known

    def remove(self, worker_id: str) -> bool:
        """A worker the API removes (``DELETE /workers/{id}``): gone at once (sglang-router 0.3's way)."""
        with self.lock:
            kept = [w for w in self.workers if w.id != worker_id]
            removed, self.workers = len(kept) < len(self.workers), kept
        return removed

    def run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                workers = list(self.workers)
            for worker in workers:
                self._check(worker)
            self.stop.wait(POLL_INTERVAL)

    def _check(self, worker: Worker) -> None:
        try:
            status = fetch(worker.url + "/health", timeout=HEALTH_TIMEOUT)[0]
            failure = None if status == 200 else f"HTTP health check returned non-success status for " \
                f"{worker.url}/health: {status} {http.client.responses.get(status, '')}".rstrip()
        except OSError as exc:
            failure = f"HTTP health check failed for {worker.url}/health: {exc}"
        with self.lock:
            if failure is None and not (worker.registered or worker.registering or worker.abandoned):
                worker.registering = True
                threading.Thread(target=self._register, args=(worker,), daemon=True).start()
            worker.failures = 0 if failure is None else worker.failures + 1
            if failure is None:
                worker.healthy = True
            elif worker.failures >= FAILURE_THRESHOLD and worker.healthy:
                worker.healthy = False
                self.log.line("WARN", "smg::core::worker", "core/worker.rs:939", failure)

    def _register(self, worker: Worker) -> None:
        """The registration workflow: read the worker's server and model info, then mark it registered; give it
        up when that step times out on every try (as sglang-router does: it never retries a worker so given up)."""
        instance, started = str(uuid.uuid4()), time.monotonic()
        self.log.info(EVENT, "workflow/event.rs:197",
                      f"Workflow started instance_id={instance} definition_id=local_worker_registration")
        for attempt in range(1, METADATA_TRIES + 1):
            metadata = _metadata(worker.url)
            if metadata is not None:
                break
            again = attempt < METADATA_TRIES
            if again:
                self.log.info(EVENT, "workflow/event.rs:247", f"Step retrying instance_id={instance} "
                                                              f"step_id=discover_metadata attempt={attempt + 1} "
                                                              f"delay_ms={RETRY_DELAY * 1000:.0f}")
            self.log.line("WARN", EVENT, "workflow/event.rs:233",
                          f'Step failed instance_id={instance} step_id=discover_metadata error="Step timeout after '
                          f'{METADATA_TIMEOUT:g}s" will_retry={str(again).lower()}')
            if again and self.stop.wait(RETRY_DELAY):
                return
        else:
            self.log.line("ERROR", EVENT, "workflow/event.rs:270",
                          f'Workflow failed instance_id={instance} failed_step=internal_scheduler '
                          f'error="Workflow deadlocked: no steps ready and none running"')
            with self.lock:
                worker.registering, worker.abandoned = False, True
            return
        info, model = metadata
        with self.lock:
            worker.metadata = {k: str(info[k]) for k in ("tp_size", "dp_size", "disaggregation_mode") if k in info}
            if model.get("model_path"):
                worker.metadata["model_path"] = str(model["model_path"])
                worker.model_id = str(model["model_path"])
            worker.registered, worker.registering = True, False
        self.log.info("smg::core::steps::worker::shared::activate", "core/steps/worker/shared/activate.rs:31",
                      "Activated 1 worker(s) (marked as healthy)")
        self.log.info(EVENT, "workflow/event.rs:259", f"Workflow completed instance_id={instance} "
                                                      f"duration_ms={(time.monotonic() - started) * 1000:.0f}")


def _metadata(url: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The worker's ``/server_info`` and ``/model_info`` (each empty when it answers none), or None when they take
    longer than the step's :data:`METADATA_TIMEOUT` together."""
    deadline = time.monotonic() + METADATA_TIMEOUT
    read = []
    for path in ("/server_info", "/model_info"):
        try:
            read.append(_json_or_empty(url + path, deadline - time.monotonic()))
        except TimeoutError:
            return None
    return read[0], read[1]


def _json_or_empty(url: str, timeout: float) -> dict[str, Any]:
    """A JSON object's answer, empty for any other; TimeoutError when none came within ``timeout``."""
    if timeout <= 0:
        raise TimeoutError(url)
    try:
        status, body, _ = fetch(url, timeout=timeout)
        data = json.loads(body) if status == 200 else {}
    except TimeoutError:
        raise
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class RouterHandler(JsonHandler):
    server: RouterServer

    def handle_one_request(self) -> None:
        self.started = time.monotonic()
        self.request_id = "req-" + uuid.uuid4().hex[:24]
        super().handle_one_request()

    def send_response(self, code: int, message: str | None = None) -> None:
        super().send_response(code, message)
        if self.command:   # None for a request line that did not parse
            latency = int((time.monotonic() - self.started) * 1e6)
            self.server.log.request(self.command, self.path, self.request_id, code, latency)

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            self.server.log.request(self.command, self.path, self.request_id, None)
        return ok

    def _refused(self, route: str) -> bool:
        """Answer 401 when the route needs the router's API key and the request lacks it."""
        key = self.server.api_key
        if not key or route not in KEYED_PATHS or self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self.reply(401)
        return True

    def do_GET(self) -> None:
        route, pool = self.path.split("?", 1)[0], self.server.pool
        if self._refused(route):
            return
        if route in ("/health", "/liveness"):
            self.reply_text(200, "OK")
        elif route == "/readiness":
            self._readiness()
        elif route == "/workers":
            workers = pool.registered()
            stats = {f"{k}_count": sum(w.kind == k for w in workers) for k in ("prefill", "decode")}
            self.reply_json(200, {"workers": [w.as_json() for w in workers], "total": len(workers),
                                  "stats": {**stats, "regular_count": 0}})
        elif route == "/v1/models":
            self._models()
        elif route == "/get_server_info":
            self.reply_json(200, {"router_manager": True, "routers_count": 1, "workers_count": len(pool.registered())})
        elif route in PROXIED_GETS:
            self._proxy_get(route)
        else:
            self.reply(404)

    def _readiness(self) -> None:
        pool = self.server.pool
        if pool.healthy("prefill") and pool.healthy("decode"):
            workers = pool.registered()
            self.reply_json(200, {"status": "ready", "healthy_workers": sum(w.healthy for w in workers),
                                  "total_workers": len(workers)})
        else:
            self.reply_json(503, {"status": "not ready", "reason": "insufficient healthy workers"})

    def _models(self) -> None:
        ids = sorted({w.model_id for w in self.server.pool.registered()})
        if not ids:
            self.reply_text(503, "No models available")
            return
        self.reply_json(200, {"object": "list", "data": [{"id": i, "object": "model", "owned_by": "local"}
                                                          for i in ids]})

    def _proxy_get(self, route: str) -> None:
        prefills = self.server.pool.healthy("prefill")
        if not prefills:
            self.reply_text(503, "No prefill servers available")
            return
        try:
            status, body, ctype = fetch(prefills[0].url + route, timeout=PROXY_TIMEOUT)
        except OSError as exc:
            self.reply_text(502, f"Failed to reach prefill server: {exc}")
            return
        self.reply(status, body, ctype)

    def do_POST(self) -> None:
        route = self.path.split("?", 1)[0]
        try:
            request = self.read_json()
        except ValueError:
            self.reply_text(400, "Failed to parse the request body as JSON")
            return
        if self._refused(route):
            return
        if route == "/workers":
            self._add_worker(request)
        elif route not in GENERATE_PATHS:
            self.reply(404)
        elif not isinstance(request, dict):
            self.reply_text(400, "Failed to parse the request body as JSON")
        else:
            self._generate(route, request)

    def _add_worker(self, request: Any) -> None:
        """``POST /workers``: 202 with the worker's id; it is health-checked, then registered."""
        url = request.get("url") if isinstance(request, dict) else None
        kind = request.get("worker_type", "decode") if isinstance(request, dict) else None
        if not isinstance(url, str) or kind not in ("prefill", "decode"):
            self.reply_json(400, {"error": "expected {url, worker_type: prefill|decode}", "code": "BAD_REQUEST"})
            return
        port = request.get("bootstrap_port")
        worker = self.server.pool.add(url, kind, port if isinstance(port, int) else None)
        self.reply_json(202, {"status": "accepted", "worker_id": worker.id, "url": url,
                              "location": f"/workers/{worker.id}",
                              "message": "Worker addition queued for background processing"})

    def do_DELETE(self) -> None:
        route = self.path.split("?", 1)[0]
        if self._refused("/workers"):
            return
        worker_id = route.removeprefix("/workers/")
        if not route.startswith("/workers/"):
            self.reply(404)
        elif self.server.pool.remove(worker_id):
            self.reply_json(202, {"status": "accepted", "worker_id": worker_id,
                                  "message": "Worker removal queued for background processing"})
        else:
            self.reply_json(404, {"error": f"Worker {worker_id} not found", "code": "WORKER_NOT_FOUND"})

    def _generate(self, route: str, request: dict[str, Any]) -> None:
        pair = self.server.pool.pick()
        if pair is None:
            self.reply_json(503, {"error": {"type": "Service Unavailable", "code": "server_selection_failed",
                                            "message": "No available servers: No prefill workers available. Please "
                                                       "check if prefill servers are configured and healthy."}})
            return
        prefill, decode = pair
        body = json.dumps({**request, "bootstrap_host": prefill.host, "bootstrap_port": prefill.bootstrap_port,
                           "bootstrap_room": random.getrandbits(63)}).encode("utf-8")
        results: dict[str, tuple[int, bytes, str] | OSError] = {}
        sender = threading.Thread(target=_send, args=(prefill.url + route, body, results, "prefill"))
        sender.start()
        _send(decode.url + route, body, results, "decode")
        sender.join()
        for kind in ("prefill", "decode"):
            result = results[kind]
            if isinstance(result, OSError):
                self.reply_text(502, f"Failed to send request to {kind} server: {result}")
                return
            if result[0] >= 400 or kind == "decode":
                self.reply(*result)
                return


def _send(url: str, body: bytes, results: dict, kind: str) -> None:
    try:
        results[kind] = fetch(url, "POST", body, timeout=PROXY_TIMEOUT)
    except OSError as exc:
        results[kind] = exc


class RouterServer(Server):
    def __init__(self, host: str, port: int, pool: Pool, log: RouterLog, api_key: str | None = None) -> None:
        self.pool = pool
        self.log = log
        self.api_key = api_key
        super().__init__((host, port), RouterHandler)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pdtui.sim.router", allow_abbrev=False,
                                     description="A stand-in for sglang_router.launch_router in PD mode.")
    parser.add_argument("--pd-disaggregation", action="store_true")
    parser.add_argument("--prefill", nargs="+", action="append", default=[], metavar="URL [BOOTSTRAP_PORT]")
    parser.add_argument("--decode", nargs=1, action="append", default=[], metavar="URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--api-key", default=None)
    args, _ignored = parser.parse_known_args(argv)
    if not args.pd_disaggregation:
        parser.error("only --pd-disaggregation mode is simulated")
    if not args.prefill or not args.decode:
        parser.error("PD mode needs at least one --prefill and one --decode")
    for entry in args.prefill:
        if len(entry) > 2 or (len(entry) == 2 and entry[1].lower() != "none" and not entry[1].isdigit()):
            parser.error(f"--prefill expects URL [BOOTSTRAP_PORT|none], got {' '.join(entry)}")
    return args


def _workers(args: argparse.Namespace) -> list[Worker]:
    workers = []
    for entry in args.prefill:
        port = int(entry[1]) if len(entry) == 2 and entry[1].isdigit() else None
        workers.append(Worker(entry[0].rstrip("/"), "prefill", port))
    workers += [Worker(url.rstrip("/"), "decode") for (url,) in args.decode]
    return workers


def _mode(workers: list[Worker]) -> str:
    prefills = ", ".join(f'("{w.url}", {f"Some({w.bootstrap_port})" if w.bootstrap_port else "None"})'
                         for w in workers if w.kind == "prefill")
    decodes = ", ".join(f'"{w.url}"' for w in workers if w.kind == "decode")
    return (f"PrefillDecode {{ prefill_urls: [{prefills}], decode_urls: [{decodes}], prefill_policy: None, "
            f"decode_policy: None }}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = RouterLog()
    pool = Pool(_workers(args), log)
    log.info("smg::server", "server.rs:794", f"Starting router on {args.host}:{args.port} | mode: "
             f"{_mode(pool.workers)} | policy: RoundRobin | max_payload: 512MB")
    try:
        server = RouterServer(args.host, args.port, pool, log, args.api_key)
    except OSError as exc:
        log.line("ERROR", "smg::server", "server.rs:1020", f"Failed to bind to {args.host}:{args.port}: {exc}")
        return 1
    log.info("smg::server", "server.rs:851", "Worker initialization job submitted (will complete in background)")
    log.info("smg::server", "server.rs:875", "Workers initialized: 0 total, 0 healthy")
    log.info("smg::server", "server.rs:985", "Router ready | workers: []")
    threading.Thread(target=pool.run, daemon=True).start()
    stop = threading.Event()
    set_on_signal(stop, signal.SIGTERM, signal.SIGINT)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    log.info("smg::server", "server.rs:1018", f"Starting server on {args.host}:{args.port}")
    stop.wait()
    log.info("smg::server", "server.rs:1088", "Received terminate signal, starting graceful shutdown")
    pool.stop.set()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
