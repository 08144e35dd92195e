"""The sim worker's HTTP API: SGLang's endpoints as the router and pdtui use them.

Observed from ``sglang-router`` 0.3.2 in PD mode: it first tries each worker
over gRPC (an HTTP/2 preface, which an HTTP/1.1 server rejects), then polls
``GET /health``, reads ``GET /server_info`` and ``GET /model_info``, and sends
every generation request to both workers with ``bootstrap_host``,
``bootstrap_port`` and ``bootstrap_room`` added, returning the decode answer.
A decode given such a request first asks that prefill's bootstrap server for
its parallel info (sim/bootstrap.py), as SGLang's does: one it cannot reach
fails the request as SGLang 0.5 fails a KV transfer (logged, counted, 500).

A generation takes the time it would on a real server (see sim/serving.py): the
prefill computes the prompt, the decode produces its tokens a few dozen a
second, a stream sends each token's event as it comes. With ``--enable-metrics``
``GET /metrics`` serves SGLang's Prometheus series; without it, 404 as SGLang's.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pdtui.sim.bootstrap import FAKE_BOOTSTRAP_HOST, BootstrapUnreachable, PrefillInfo
from pdtui.sim.httpserve import JsonHandler, Server
from pdtui.sim.serving import MAX_TOTAL_TOKENS, Serving

WORDS = ("The quick brown fox jumps over the lazy dog while the simulated decode worker streams "
         "tokens back through the router to whoever asked").split()
GENERATE_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
GET_PATHS = ("/health", "/health_generate", "/ready", "/get_model_info", "/model_info", "/get_server_info",
             "/server_info", "/v1/models")
HANG = 3600.0       # seconds a hanging /server_info keeps its asker waiting: longer than anyone waits


@dataclass
class FailWindow:
    """A while of failures that the first generation served opens: from ``after`` seconds past it, for ``length``
    seconds (monotonic clock), so a bring-up's smoke passes and the failures come once serving."""

    after: float
    length: float
    opened: float | None = None

    def active(self) -> bool:
        """Whether failures are due now; the first call opens the window."""
        now = time.monotonic()
        if self.opened is None:
            self.opened = now
        return self.opened + self.after <= now < self.opened + self.after + self.length


@dataclass
class WorkerState:
    """What the HTTP side needs to know about the worker, shared with its main thread."""

    role: str
    model: str
    host: str
    port: int
    bootstrap_port: int
    tp_size: int
    access_log: Callable[[str], None]
    serving: Serving
    metrics: Callable[[], tuple[bytes, str]] | None = None   # /metrics' body and type; None: not enabled
    fail_generate: bool = False
    fail_later: FailWindow | None = None          # generate-fails-later: generations answer 500 for a while
    transfer_errors: bool = False                 # every routed request's KV transfer fails (logged, 500)
    transfer_later: FailWindow | None = None      # transfer-errors-later: the same, for a while
    transfer_stalls: FailWindow | None = None     # transfer-stalls: routed requests' transfers never complete
    prefills: PrefillInfo = field(default_factory=PrefillInfo)   # a decode's look-ups in the bootstrap servers
    answer: str = "content"                       # where a chat's tokens go (reasoning-only: "reasoning"), or "empty"
    content_beside_reasoning: str | None = ""     # a reasoning-only chat's content: null (0.4.x) or ""
    count_transfer_failure: Callable[[], None] = lambda: None   # /metrics' failed-transfer counter
    error_log: Callable[[str], None] = print
    healthy: threading.Event = field(default_factory=threading.Event)
    up: threading.Event = field(default_factory=threading.Event)     # its warm-up succeeded (SGLang's status Up)
    serves_ready: bool = False  # /ready answers (0.5.23): 200 once up; else 404 (older releases)
    server_args: dict[str, Any] = field(default_factory=dict)    # what /server_info adds: the args as resolved
    dummy: bool = False         # a rank >= 1 of a server over several nodes: SGLang's dummy health app alone
    server_info_hangs: bool = False   # server-info-hangs: /server_info never answers (its scheduler is busy)

    def generation_fails(self) -> bool:
        """Whether this generation answers 500: always (generate-500), or inside the window that the first
        generation served opens (generate-fails-later)."""
        return self.fail_generate or (self.fail_later is not None and self.fail_later.active())

    def transfer_fails(self) -> bool:
        """Whether a routed request's KV transfer fails: always (transfer-errors), or inside the window that the
        first generation served opens (transfer-errors-later)."""
        return self.transfer_errors or (self.transfer_later is not None and self.transfer_later.active())

    def transfer_stalls_now(self, request: dict[str, Any]) -> bool:
        """Whether this request's KV transfer stalls: a routed one, inside the window that the first generation
        served opens (transfer-stalls)."""
        routed = request.get("bootstrap_room") is not None and request.get("bootstrap_host") != FAKE_BOOTSTRAP_HOST
        return routed and self.transfer_stalls is not None and self.transfer_stalls.active()

    def unreachable_prefill(self, request: dict[str, Any]) -> str | None:
        """Why a decode cannot take this routed request from its prefill (its bootstrap server cannot be reached,
        logged as SGLang logs it), or None: it can, or this is a prefill (it is the one asked)."""
        host = request.get("bootstrap_host")
        if self.role != "decode" or not isinstance(host, str) or not host:
            return None
        port = request.get("bootstrap_port")
        if not isinstance(port, int) or isinstance(port, bool):
            port = self.bootstrap_port      # none given: the decode's own --disaggregation-bootstrap-port
        try:
            self.prefills.ensure(host, port)
        except BootstrapUnreachable as exc:
            self.error_log(str(exc))
            return f"Could not fetch prefill parallel info from bootstrap_addr: {host}:{port}"
        return None

    def transfer_failed(self, request: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        """Log SGLang's per-request transfer error for a routed request and count it; the error body its client
        gets (SGLang 0.5 answers a failed transfer's abort with the same line, HTTP 500)."""
        room = request.get("bootstrap_room")
        rid = uuid.uuid4().hex
        if self.role == "decode":
            cause = reason or "Failed to get kvcache from prefill instance, it might be dead"
            line = (f"Decode transfer failed for request rank=0 decode_req.req.rid='{rid}' "
                    f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): "
                    f"{cause}")
        else:
            cause = reason or "Decode instance could be dead, remote mooncake session is not alive"
            line = (f"Prefill transfer failed for request rank=0 req.rid='{rid}' req.bootstrap_room={room} "
                    f"with exception KVTransferError(bootstrap_room={room}): {cause}")
        self.error_log(line)
        self.count_transfer_failure()
        return {"object": "error", "message": line, "type": "500", "param": None, "code": 500}

    def refusal(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """The status and body a generation request gets before it is served, if it fails; None to serve it.

        Only a routed request moves KV, so only it can fail a transfer: not a plain one, nor one naming SGLang's
        fake bootstrap host (/health's generate)."""
        routed = request.get("bootstrap_room") is not None
        if self.generation_fails():
            return 500, _error("Internal server error: the scheduler returned no output", 500)
        if self.role == "prefill" and not routed:
            return 400, _error("Prefill disaggregation mode needs bootstrap_host, bootstrap_port and bootstrap_room "
                               "(send requests through the router)", 400)
        if not routed or request.get("bootstrap_host") == FAKE_BOOTSTRAP_HOST:
            return None
        if self.transfer_fails():
            return 500, self.transfer_failed(request)
        reason = self.unreachable_prefill(request)
        return (500, self.transfer_failed(request, reason)) if reason else None

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model, "tokenizer_path": self.model, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False}

    def server_info(self) -> dict[str, Any]:
        return {"model_path": self.model, "tokenizer_path": self.model, "host": self.host, "port": self.port,
                "tp_size": self.tp_size, "dp_size": 1, "pp_size": 1, "disaggregation_mode": self.role,
                "disaggregation_bootstrap_port": self.bootstrap_port,
                "max_total_num_tokens": MAX_TOTAL_TOKENS, "chunked_prefill_size": 8192, "context_length": 32768,
                **self.server_args,
                "internal_states": [{"last_gen_throughput": round(self.serving.snapshot().gen_throughput, 2),
                                     "avg_spec_accept_length": None}]}

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": int(time.time()),
                                            "owned_by": "sglang", "root": self.model, "max_model_len": 32768}]}


class WorkerHandler(JsonHandler):
    server: WorkerServer
    server_version = "uvicorn"
    sys_version = ""
    invalid = False

    @property
    def state(self) -> WorkerState:
        return self.server.state

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Uvicorn's access line, e.g. ``127.0.0.1:48908 - "GET /health HTTP/1.1" 200 OK``."""
        if self.invalid:
            return
        phrase = self.responses.get(int(code), ("",))[0] if str(code).isdigit() else ""
        host, port = self.client_address[:2]
        self.state.access_log(f'INFO:     {host}:{port} - "{self.requestline}" {code} {phrase}')

    def log_error(self, format: str, *args: Any) -> None:   # noqa: A002 - stdlib signature
        """A request line the server could not parse (the router's HTTP/2 probe): uvicorn's warning."""
        self.invalid = True
        self.state.access_log("WARNING:  Invalid HTTP request received.")

    def _dummy(self, route: str) -> None:
        """SGLang's dummy health app of a rank >= 1: 200 whatever its schedulers do, /metrics when enabled."""
        if route in ("/health", "/health_generate", "/ping"):
            self.reply(200)
        elif route == "/metrics" and self.state.metrics is not None:
            self.reply(200, *self.state.metrics())
        else:
            self.reply_json(404, {"detail": "Not Found"})

    def do_GET(self) -> None:
        route = self.path.split("?", 1)[0]
        state = self.state
        if state.dummy:
            self._dummy(route)
        elif route in ("/health", "/health_generate"):
            self.reply(200 if state.healthy.is_set() else 503)
        elif route == "/ready" and state.serves_ready:
            self.reply(200 if state.up.is_set() else 503)
        elif route in ("/get_model_info", "/model_info"):
            self.reply_json(200, state.model_info())
        elif route in ("/get_server_info", "/server_info"):
            if state.server_info_hangs:
                time.sleep(HANG)      # SGLang asks its scheduler, which does not come back to its loop
            self.reply_json(200, state.server_info())
        elif route == "/v1/models":
            self.reply_json(200, state.models())
        elif route == "/metrics" and state.metrics is not None:
            self.reply(200, *state.metrics())
        elif route in GENERATE_PATHS:
            self.reply_json(405, {"detail": "Method Not Allowed"})
        else:
            self.reply_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        route = self.path.split("?", 1)[0]
        if self.state.dummy:
            self.read_body()
            self.reply_json(404, {"detail": "Not Found"})
            return
        try:
            request = self.read_json()
        except ValueError:
            self.reply_json(400, _error("Invalid JSON body", 400))
            return
        if route in GET_PATHS:
            self.reply_json(405, {"detail": "Method Not Allowed"})
        elif route not in GENERATE_PATHS:
            self.reply_json(404, {"detail": "Not Found"})
        elif not isinstance(request, dict):
            self.reply_json(400, _error("The request body must be a JSON object", 400))
        elif (refused := self.state.refusal(request)) is not None:
            self.reply_json(*refused)
        else:
            self._generate(route, request)

    def _generate(self, route: str, request: dict[str, Any]) -> None:
        """Answer once the load model has taken the request through (a stream: each token as it comes)."""
        started = time.monotonic()
        prefix, prefix_tokens = _prefix(request)
        limit = _max_tokens(route, request)
        tokens = self.state.serving.serve(_prompt_tokens(request), limit, prefix, prefix_tokens,
                                          stalls=self.state.transfer_stalls_now(request))
        try:
            if request.get("stream"):
                self.reply_events(_stream(route, request, self.state, tokens, limit))
            else:
                produced = sum(1 for _ in tokens)
                self.reply_json(200, _answer(route, request, self.state, produced, limit, time.monotonic() - started))
        finally:
            tokens.close()     # a client gone mid-stream: the request ends here too


def _error(message: str, code: int) -> dict[str, Any]:
    kind = "BadRequestError" if code < 500 else "InternalServerError"
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def _text(produced: int) -> str:
    """The answer's first ``produced`` tokens: the words, over again when it is longer than they are."""
    return " ".join(WORDS[n % len(WORDS)] for n in range(produced))


def _answer(route: str, request: dict[str, Any], state: WorkerState, produced: int, limit: int,
            latency: float = 0.0) -> Any:
    """The body SGLang returns for ``route``; prefill generates nothing (decode answers for it)."""
    if state.answer == "empty":           # SGLang's graceful abort: 200, nothing generated
        produced = 0
    text = _text(produced)
    finish = "abort" if state.answer == "empty" else "length" if produced == limit else "stop"
    prompt = _prompt_tokens(request)
    usage = {"prompt_tokens": prompt, "completion_tokens": produced, "total_tokens": prompt + produced}
    created = int(time.time())
    if route == "/v1/chat/completions":
        reasoning = state.answer == "reasoning"
        message = {"role": "assistant", "content": state.content_beside_reasoning if reasoning else text,
                   "reasoning_content": text if reasoning else None, "tool_calls": None}
        return {"id": uuid.uuid4().hex, "object": "chat.completion", "created": created, "model": state.model,
                "choices": [{"index": 0, "message": message,
                             "logprobs": None, "finish_reason": finish, "matched_stop": None}],
                "usage": usage}
    if route == "/v1/completions":
        return {"id": uuid.uuid4().hex, "object": "text_completion", "created": created, "model": state.model,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                             "matched_stop": None}], "usage": usage}
    one = {"text": text, "meta_info": {"id": uuid.uuid4().hex, "finish_reason": {"type": finish, "length": produced},
                                       "prompt_tokens": prompt, "completion_tokens": produced, "cached_tokens": 0,
                                       "e2e_latency": round(latency, 4)}}
    texts = request.get("text")
    return [one] * len(texts) if isinstance(texts, list) else one


def _stream(route: str, request: dict[str, Any], state: WorkerState, tokens: Iterator[int],
            limit: int) -> Iterator[dict[str, Any]]:
    """The events of a streamed answer, each when its token is produced; the last carries the finish reason."""
    produced = 0
    if route == "/generate":
        for n in tokens:
            produced = n + 1
            yield _answer(route, request, state, produced, limit)
        if not produced:
            yield _answer(route, request, state, 0, limit)
        return
    chat = route == "/v1/chat/completions"
    head = {"id": uuid.uuid4().hex, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": state.model}

    def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"delta": {"role": "assistant", "content": text}} if chat else {"text": text or ""}
        return {**head, "choices": [{"index": 0, **body, "logprobs": None, "finish_reason": finish}]}

    for n in tokens:
        produced = n + 1
        yield chunk(("" if n == 0 else " ") + WORDS[n % len(WORDS)], None)
    last = _answer(route, request, state, produced, limit)
    yield {**chunk(None, last["choices"][0]["finish_reason"]), "usage": last["usage"]}


def _max_tokens(route: str, request: dict[str, Any]) -> int:
    if route == "/generate":
        value = (request.get("sampling_params") or {}).get("max_new_tokens", 16)
    else:
        value = request.get("max_completion_tokens") or request.get("max_tokens") or 16
    return max(0, int(value)) if isinstance(value, (int, float)) else 16


def _prompt_tokens(request: dict[str, Any]) -> int:
    """The prompt's tokens, a word each."""
    messages = request.get("messages")
    if isinstance(messages, list):
        return sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
    prompt = request.get("text", request.get("prompt", ""))
    return len(str(prompt).split())


def _prefix(request: dict[str, Any]) -> tuple[str, int]:
    """A chat's messages before the last (its system prompt, the turns so far) and their tokens: what a prefix
    cache finds again when the same conversation, or the same system prompt, comes back."""
    messages = request.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        return "", 0
    earlier = [str(m.get("content", "")) for m in messages[:-1] if isinstance(m, dict)]
    return "\x00".join(earlier), sum(len(text.split()) for text in earlier)


class WorkerServer(Server):
    def __init__(self, state: WorkerState) -> None:
        self.state = state
        super().__init__((state.host, state.port), WorkerHandler)

    def start(self) -> threading.Thread:
        """Serve in a background thread (the main thread writes the startup log)."""
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        return thread
