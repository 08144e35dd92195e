"""The sim worker's HTTP API: SGLang's endpoints as the router and pdtui use them.

Observed from ``sglang-router`` 0.3.2 in PD mode: it first tries each worker
over gRPC (an HTTP/2 preface, which an HTTP/1.1 server rejects), then polls
``GET /health``, reads ``GET /server_info`` and ``GET /model_info``, and sends
every generation request to both workers with ``bootstrap_host``,
``bootstrap_port`` and ``bootstrap_room`` added, returning the decode answer.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdtui.sim.httpserve import JsonHandler, Server

WORDS = ("The quick brown fox jumps over the lazy dog while the simulated decode worker streams "
         "tokens back through the router to whoever asked").split()
GENERATE_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
GET_PATHS = ("/health", "/health_generate", "/get_model_info", "/model_info", "/get_server_info", "/server_info",
             "/v1/models")


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
    fail_generate: bool = False
    fail_later: tuple[float, float] | None = None    # (after, for): generations fail from ``after`` seconds past
    fail_window: tuple[float, float] | None = None   # the first one served, for ``for`` seconds (monotonic clock)
    transfer_errors: bool = False                 # every routed request's KV transfer fails (logged, 500)
    error_log: Callable[[str], None] = print
    healthy: threading.Event = field(default_factory=threading.Event)

    def generation_fails(self) -> bool:
        """Whether this generation answers 500: always (generate-500), or inside the window that the first
        generation served opens (generate-fails-later)."""
        if self.fail_generate:
            return True
        now = time.monotonic()
        if self.fail_later is not None and self.fail_window is None:
            after, length = self.fail_later
            self.fail_window = (now + after, now + after + length)
        return self.fail_window is not None and self.fail_window[0] <= now < self.fail_window[1]

    def transfer_failed(self, request: dict[str, Any]) -> dict[str, Any]:
        """Log SGLang's per-request transfer error for a routed request; the error body its client gets."""
        room = request.get("bootstrap_room")
        rid = uuid.uuid4().hex
        if self.role == "decode":
            line = (f"Decode transfer failed for request rank=0 decode_req.req.rid='{rid}' "
                    f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): "
                    f"Failed to get kvcache from prefill instance, it might be dead")
        else:
            line = (f"Prefill transfer failed for request rank=0 req.rid='{rid}' req.bootstrap_room={room} "
                    f"with exception KVTransferError(bootstrap_room={room}): Decode instance could be dead, "
                    f"remote mooncake session is not alive")
        self.error_log(line)
        return _error(f"KV transfer failed for request {rid}", 500)

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.model, "tokenizer_path": self.model, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False}

    def server_info(self) -> dict[str, Any]:
        return {"model_path": self.model, "tokenizer_path": self.model, "host": self.host, "port": self.port,
                "tp_size": self.tp_size, "dp_size": 1, "pp_size": 1, "disaggregation_mode": self.role,
                "disaggregation_bootstrap_port": self.bootstrap_port,
                "disaggregation_transfer_backend": "mooncake", "max_total_num_tokens": 834615,
                "chunked_prefill_size": 8192, "context_length": 32768, "version": "0.5.5-sim",
                "internal_states": [{"last_gen_throughput": 0.0, "avg_spec_accept_length": None}]}

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

    def do_GET(self) -> None:
        route = self.path.split("?", 1)[0]
        state = self.state
        if route in ("/health", "/health_generate"):
            self.reply(200 if state.healthy.is_set() else 503)
        elif route in ("/get_model_info", "/model_info"):
            self.reply_json(200, state.model_info())
        elif route in ("/get_server_info", "/server_info"):
            self.reply_json(200, state.server_info())
        elif route == "/v1/models":
            self.reply_json(200, state.models())
        elif route in GENERATE_PATHS:
            self.reply_json(405, {"detail": "Method Not Allowed"})
        else:
            self.reply_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        route = self.path.split("?", 1)[0]
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
        elif self.state.generation_fails():
            self.reply_json(500, _error("Internal server error: the scheduler returned no output", 500))
        elif self.state.transfer_errors and request.get("bootstrap_room") is not None:
            self.reply_json(500, self.state.transfer_failed(request))
        elif self.state.role == "prefill" and request.get("bootstrap_room") is None:
            self.reply_json(400, _error("Prefill disaggregation mode needs bootstrap_host, bootstrap_port "
                                        "and bootstrap_room (send requests through the router)", 400))
        elif request.get("stream"):
            self.reply_events(_stream(route, request, self.state))
        else:
            self.reply_json(200, _answer(route, request, self.state))


def _error(message: str, code: int) -> dict[str, Any]:
    kind = "BadRequestError" if code < 500 else "InternalServerError"
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}


def _answer(route: str, request: dict[str, Any], state: WorkerState) -> Any:
    """The body SGLang returns for ``route``; prefill generates nothing (decode answers for it)."""
    limit = _max_tokens(route, request)
    produced = 0 if state.role == "prefill" else min(limit, len(WORDS))
    text = " ".join(WORDS[:produced])
    finish = "length" if produced == limit else "stop"
    prompt = _prompt_tokens(request)
    usage = {"prompt_tokens": prompt, "completion_tokens": produced, "total_tokens": prompt + produced}
    created = int(time.time())
    if route == "/v1/chat/completions":
        return {"id": uuid.uuid4().hex, "object": "chat.completion", "created": created, "model": state.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "reasoning_content": None,
                                                     "tool_calls": None},
                             "logprobs": None, "finish_reason": finish, "matched_stop": None}],
                "usage": usage}
    if route == "/v1/completions":
        return {"id": uuid.uuid4().hex, "object": "text_completion", "created": created, "model": state.model,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                             "matched_stop": None}], "usage": usage}
    one = {"text": text, "meta_info": {"id": uuid.uuid4().hex, "finish_reason": {"type": finish, "length": produced},
                                       "prompt_tokens": prompt, "completion_tokens": produced, "cached_tokens": 0,
                                       "e2e_latency": 0.01}}
    texts = request.get("text")
    return [one] * len(texts) if isinstance(texts, list) else one


def _stream(route: str, request: dict[str, Any], state: WorkerState) -> list[dict[str, Any]]:
    """The events of a streamed answer: one per token, the last one carrying the finish reason."""
    full = _answer(route, request, state)
    if route == "/generate":
        words = full["text"].split()
        return [{**full, "text": " ".join(words[:n + 1])} for n in range(len(words))] or [full]
    chat = route == "/v1/chat/completions"
    choice = full["choices"][0]
    words = (choice["message"]["content"] if chat else choice["text"]).split()
    kind = "chat.completion.chunk" if chat else "text_completion"
    head = {"id": full["id"], "object": kind, "created": full["created"], "model": full["model"]}

    def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"delta": {"role": "assistant", "content": text}} if chat else {"text": text or ""}
        return {**head, "choices": [{"index": 0, **body, "logprobs": None, "finish_reason": finish}]}

    tokens = [chunk(("" if n == 0 else " ") + word, None) for n, word in enumerate(words)]
    return [*tokens, {**chunk(None, choice["finish_reason"]), "usage": full["usage"]}]


def _max_tokens(route: str, request: dict[str, Any]) -> int:
    if route == "/generate":
        value = (request.get("sampling_params") or {}).get("max_new_tokens", 16)
    else:
        value = request.get("max_completion_tokens") or request.get("max_tokens") or 16
    return max(0, int(value)) if isinstance(value, (int, float)) else 16


def _prompt_tokens(request: dict[str, Any]) -> int:
    messages = request.get("messages")
    if isinstance(messages, list):
        return sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
    prompt = request.get("text", request.get("prompt", ""))
    return len(str(prompt).split())


class WorkerServer(Server):
    def __init__(self, state: WorkerState) -> None:
        self.state = state
        super().__init__((state.host, state.port), WorkerHandler)

    def start(self) -> threading.Thread:
        """Serve in a background thread (the main thread writes the startup log)."""
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        return thread
