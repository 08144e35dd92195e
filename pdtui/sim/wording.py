"""What the sim worker prints, in each generation of SGLang's wording.

Taken from SGLang's own source of each release (``http_server.py``,
``engine.py``, ``model_runner.py``, ``disaggregation/common/conn.py``); the
lines pdtui must judge are the ones servers/sglang/signatures.py knows, and a test
checks that every line here is judged as it should be.

- ``older``: 0.4.7-0.4.10 (2025). ``/health`` answers 200 as soon as HTTP is up.
- ``2025``: 0.5.x of 2025. ``/health`` answers 503 while Starting, then 200,
  also after a failed warm-up.
- ``current``: 2026 (0.5.23), as a real 0.5.23 printed it on this machine's CPU
  (tests/integration/test_real_sglang.py compares them). As 2025 for ``/health``;
  ``Init parallel begin.`` in place of the torch-distributed line; server
  arguments as a dict; the prefill's bootstrap server started (and saying so)
  before the scheduler's first line; per-graph CUDA graph lines; an ``Engine
  startup timings`` line; batch lines with a comma after "batch" and the PD
  queues' counts; an HTTP port taken is said, then the server hangs; no rank
  prefix on a server of one rank; ``mooncake_tcp`` resolved to Mooncake over TCP.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtui.sim.knobs import DEFAULT_GENERATION, GENERATIONS

__all__ = ["DEFAULT_GENERATION", "GENERATIONS", "WORDINGS", "Wording"]
_RESP = ("[{'text': '', 'meta_info': {'id': 'warmup', 'finish_reason': {'type': 'length', 'length': 8}, "
         "'prompt_tokens': 4, 'completion_tokens': 8, 'cached_tokens': 0}}]")


TORCH_DISTRIBUTED = ("Init torch distributed begin.", "Init torch distributed ends. mem usage=1.96 GB")


@dataclass(frozen=True)
class Wording:
    generation: str
    version: str                    # what /server_info's "version" says
    health_before_warmup: int       # what /health answers between "Uvicorn running" and the end of the warm-up
    parallel: tuple[str, str]       # the distributed init's first and last lines
    graph_begin: str
    graph_end: str
    warmup_start: str
    warmup_ok: tuple[str, ...]
    warmup_failed: str              # {mode}: prefill | decode
    sigquit: str
    bootstrap_started: str | None   # {host} {port}
    inter_token_metric: str = "sglang:inter_token_latency_seconds"   # the /metrics histogram between two tokens
    kv_series: bool = False         # /metrics has the KV transfer series (sglang:kv_transfer_*, failed counters)
    content_beside_reasoning: str | None = ""   # a chat's content when the reasoning parser took every token
    args_as_dict: bool = False      # server_args={...} (0.5.23) rather than server_args=ServerArgs(...)
    bootstrap_first: bool = False   # the bootstrap server starts in the main process, before the scheduler's lines
    startup_timings: bool = False   # "Memory baseline taken." and "Engine startup timings (s): ..."
    batch_sep: str = "."            # "Prefill batch. #new-seq" or (0.5.23) "Prefill batch, #new-seq"
    model_info: str = "/get_model_info"   # what the warm-up asks first (0.5.23: /model_info)
    exits_on_bind_error: bool = True      # 0.5.23 whose HTTP port is taken says so, then hangs: it never exits
    rank_prefix_when_many: bool = False   # 0.5.23 prefixes its scheduler's lines with " TP0" only when TP > 1
    tcp_as_mooncake: bool = False         # 0.5.23 runs mooncake_tcp as mooncake with MC_FORCE_TCP=1, and says so
    serves_ready: bool = False            # 0.5.23's /ready: /health's answer without its generation, and 503 after a
                                          # failed warm-up (its status UnHealthy), where /health answers 200

    def warmup_failure(self, mode: str) -> str:
        return self.warmup_failed.format(mode=mode)


WORDINGS: dict[str, Wording] = {
    "older": Wording(
        "older", "0.4.10", 200, TORCH_DISTRIBUTED,
        "Capture cuda graph begin. This can take up to several minutes. avail mem=13.95 GB",
        "Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=12.51 GB.",
        "Start of prefill warmup ...",
        (f"End of prefill warmup with status 200, resp: {_RESP}",),
        "End of prefill warmup with status 400, resp: {{'object': 'error', 'message': 'Bad Request', "
        "'type': 'BadRequestError', 'param': None, 'code': 400}}",
        "Received sigquit from a child proces. It usually means the child failed.",
        None,
        "sglang:time_per_output_token_seconds",
        content_beside_reasoning=None,     # 0.4.x: "content": null
    ),
    "2025": Wording(
        "2025", "0.5.5", 503, TORCH_DISTRIBUTED,
        "Capture cuda graph begin. This can take up to several minutes. avail mem=13.95 GB",
        "Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=12.51 GB.",
        "Start of pd disaggregation warmup ...",
        (f"End of prefill disaggregation mode warmup with status 200, resp: {_RESP}",),
        "Prefill disaggregation mode warm Up Failed, status code: 400",
        "Received sigquit from a child process. It usually means the child failed.",
        None,
    ),
    "current": Wording(
        "current", "0.5.23", 503, ("Init parallel begin.", "Init parallel ends. elapsed=0.10 s"),
        "Capture decode CUDA graph begin. backend=full, avail mem=13.95 GB",
        "Capture decode CUDA graph end. elapsed=5.37 s, mem usage=1.44 GB, avail mem=12.51 GB.",
        "Start of pd disaggregation warmup ...",
        ("Disaggregation warmup requests completed for all 1 DP ranks", "End of disaggregation warmup"),
        "Disaggregation warmup failed (mode={mode}), status codes: [400]",
        "Received sigquit from a child process. It usually means the child failed.",
        "CommonKVBootstrapServer started successfully on {host}:{port}",
        kv_series=True, args_as_dict=True, bootstrap_first=True, startup_timings=True, batch_sep=",",
        model_info="/model_info", exits_on_bind_error=False, rank_prefix_when_many=True,
        tcp_as_mooncake=True, serves_ready=True,
    ),
}
