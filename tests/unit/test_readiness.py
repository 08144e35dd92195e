import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdtui.engine.events import LineKind
from pdtui.engine.readiness import FailureCandidate, LineJudge
from pdtui.servers.sglang.signatures import request_line
from pdtui.servers.sglang.signatures import signatures_for as failure_signatures
from pdtui.vocabulary.signatures import Severity

SGLANG = LineJudge("fired up and ready", failure_signatures("decode"))


def test_ready_line():
    assert SGLANG.kind("[2025-02-17 05:27:32] The server is fired up and ready to roll!") is LineKind.READY


def test_failure_lines_from_the_facts():
    lines = {
        "[2026-04-15 08:41:05] Prefill disaggregation mode warm Up Failed, status code: 400": "PD warm-up failed",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB.": "CUDA out of memory",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.": "not enough GPU memory",
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)": "NCCL error",
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use":
            "HTTP port already in use",
        "[2025-02-09 21:23:00 TP2] Scheduler hit an exception: Traceback (most recent call last):": "scheduler crashed",
        "[2024-12-13 01:47:34] Initialization failed. warmup error: Traceback (most recent call last):":
            "initialization failed (the warm-up raised)",
    }
    for line, reason in lines.items():
        assert SGLANG.failure(line).reason == reason, line
        assert SGLANG.kind(line) is LineKind.FAIL


def test_ordinary_lines_are_neither():
    line = "[2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB"
    assert SGLANG.failure(line) is None
    assert SGLANG.kind(line) is LineKind.NORMAL


SMG_SPAN = ("\x1b[2m2026-12-03 16:26:32\x1b[0m \x1b[32m INFO\x1b[0m \x1b[1mhttp_request\x1b[0m\x1b[1m{\x1b[0m\x1b[3mmethod"
            "\x1b[0m\x1b[2m=\x1b[0mGET \x1b[3mpath\x1b[0m\x1b[2m=\x1b[0m/workers \x1b[3mversion\x1b[0m\x1b[2m=\x1b[0mHTTP/1.1}"
            "\x1b[2m:\x1b[0m smg::request\x1b[2m:\x1b[0m model_gateway/src/middleware/logging.rs:170: started processing request")


@pytest.mark.parametrize("line", [
    SMG_SPAN,                                         # smg 1.13, as its journal holds it (colours and all)
    "INFO http_request{method=GET uri=/readiness?from=pdtui version=HTTP/1.1 status_code=503 latency=113}: "
    "smg::response: src/middleware.rs:349: request failed with server error",    # sglang-router 0.3
    '[2026-12-03 16:26:40] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',   # a server's uvicorn
    'INFO:     10.0.0.7:40412 - "POST /generate HTTP/1.1" 500 Internal Server Error',
])
def test_a_line_of_an_answered_request_is_a_request_line(line: str) -> None:
    assert request_line(line)


@pytest.mark.parametrize("line", [
    "2026-12-03 16:26:40  INFO smg::core::steps::worker::shared::activate: Activated 1 worker(s) (marked as healthy)",
    "[2025-02-17 05:27:32] The server is fired up and ready to roll!",
    "WARN smg::workflow::event: Step failed step_id=detect_connection_mode error=\"http health check failed for "
    "explicitly configured worker URL http://127.0.0.1:2: error sending request for url (http://127.0.0.1:2/health)\"",
    "[2026-04-15 08:41:05] Prefill disaggregation mode warm Up Failed, status code: 400",
])
def test_the_news_of_a_start_up_is_no_request_line(line: str) -> None:
    assert not request_line(line)


def test_warning_by_priority_or_text():
    assert SGLANG.kind("something", priority=4) is LineKind.WARN
    assert SGLANG.kind("[x] WARNING: slow") is LineKind.WARN


def test_user_fail_pattern_outranks_defaults():
    judge = LineJudge(None, failure_signatures("prefill", ("my extra failure",)))
    assert judge.failure("Traceback (most recent call last): my extra failure").reason.startswith("matched fail")


def test_most_telling_failure_line_wins():
    judge = SGLANG
    first = "Scheduler hit an exception: Traceback (most recent call last):"
    candidate = FailureCandidate(judge.failure(first), first)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB."
    candidate.consider(judge.failure(oom), oom)
    candidate.consider(judge.failure("Received sigquit from a child process."), "Received sigquit from a child process.")
    assert candidate.line == oom and candidate.signature.reason == "CUDA out of memory"


def test_other_role_has_no_default_failures():
    assert failure_signatures("other") == ()


def test_prefilter_reads_literal_alternations_and_keeps_real_regexes():
    import re

    from pdtui.engine.readiness import Prefilter, _literals
    assert _literals(r"Traceback \(most recent call last\)") == ["Traceback (most recent call last)"]
    assert _literals("CUDA out of memory|OutOfMemoryError") == ["CUDA out of memory", "OutOfMemoryError"]
    assert _literals(r"\bWARN") is None and _literals("a.b") is None
    prefilter = Prefilter([re.compile("NCCL error"), re.compile(r"step \d+ failed")])
    assert prefilter.hits("RuntimeError: NCCL error: unhandled") == [0]
    assert prefilter.hits("step 12 failed") == [1] and prefilter.hits("step x failed") == []


def test_prefilter_names_every_pattern_whose_text_a_line_holds_even_where_their_texts_overlap():
    from pdtui.engine.readiness import Prefilter
    prefilter = Prefilter(["weight begin", re.compile("Load weight|KV Cache"), "begin. avail"])
    assert prefilter.hits("[TP0] Load weight begin. avail mem=137.34 GB") == [0, 1, 2]


def test_user_regex_failure_still_found_past_the_prefilter():
    judge = LineJudge(r"ready\s+to\s+roll", failure_signatures("decode", (r"step \d+ failed",)))
    assert judge.kind("step 7 failed") is LineKind.FAIL
    assert judge.kind("ready   to  roll") is LineKind.READY
    assert judge.kind("an ordinary line", priority=3) is LineKind.WARN


# Every generation's PD warm-up wording, as SGLang's own source prints it.
WARMUP_FAILURES = {
    "older": "[2025-06-02 10:00:00] End of prefill warmup with status 400, resp: {'object': 'error'}",
    "2025": "[2026-04-15 08:41:05] Prefill disaggregation mode warm Up Failed, status code: 400",
    "current (one code)": "[2026-10-01 08:41:05] Disaggregation warmup failed (mode=decode), status code: 400",
    "current (a list)": "[2026-11-01 08:41:05] Disaggregation warmup failed (mode=prefill), status codes: [400]",
}
WARMUP_SUCCESSES = {
    "older": "[2025-06-02 10:00:00] End of prefill warmup with status 200, resp: [{'text': ''}]",
    "2025": "[2025-10-16 09:06:41] End of prefill disaggregation mode warmup with status 200, resp: [{'text': ''}]",
    "current (one rank)": "[2026-10-01 08:41:05] Disaggregation warmup request completed with status 200, resp: {}",
    "current (all ranks)": "[2026-11-01 08:41:05] Disaggregation warmup requests completed for all 1 DP ranks",
    "current (end)": "[2026-11-01 08:41:05] End of disaggregation warmup",
}


@pytest.mark.parametrize("generation", WARMUP_FAILURES)
def test_every_generations_warm_up_failure_is_fatal(generation):
    line = WARMUP_FAILURES[generation]
    assert SGLANG.failure(line).reason == "PD warm-up failed"
    assert SGLANG.kind(line) is LineKind.FAIL


@pytest.mark.parametrize("generation", WARMUP_SUCCESSES)
def test_every_generations_warm_up_success_is_evidence(generation):
    found = SGLANG.signature(WARMUP_SUCCESSES[generation])
    assert found.severity is Severity.EVIDENCE and found.check == "warm-up"
    assert SGLANG.failure(WARMUP_SUCCESSES[generation]) is None


FATAL = {
    "TokenizerManager hit an exception: Traceback (most recent call last):": "a server process crashed",
    "DetokenizerManager hit an exception: Traceback": "a server process crashed",
    "Received sigquit from a child proces. It usually means the child failed.": "a server process died",
    "Received sigquit from a child process. It usually means the child failed.": "a server process died",
    "Child process unexpectedly failed with exitcode=9. pid=12345": "a server process died",
    "Child process unexpectedly failed with an exit code 9. pid=12345": "a server process died",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    "mem_fraction_static=0.88": "not enough GPU memory",
    "Mooncake Transfer Engine initialization failed.": "Mooncake transfer engine failed to start",
    "Please install NIXL by following the instructions at https://github.com/ai-dynamo/nixl":
        "KV transfer backend not installed",
    "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND": "NIXL backend error",
    "[2026-01-02 10:00:00 TP0] Server error: [Errno 98] error while attempting to bind on address "
    "('0.0.0.0', 8998): address already in use": "bootstrap server failed",
    "Prefill instance failed to register to bootstrap server after 5 retries":
        "the prefill cannot register with its bootstrap server",
    # What real users' failing servers printed (public issue threads, 2025-2026).
    "RuntimeError: Mooncake memory registration failed.": "Mooncake could not register the KV cache's memory",
    "E1203 10:11:12.345678 4242 rdma_context.cpp:203] Failed to register memory 0x7f2a40000000: Invalid argument "
    "[22]": "the transfer engine could not register memory for RDMA",
    "E1203 10:11:12.345678 4242 rdma_context.cpp:203] Failed to register memory 0x7f2a40000000: Bad address [14]":
        "the transfer engine could not register memory for RDMA",
    "nixl._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND": "NIXL: an agent or a memory region was not found",
    "createBackend: backend 'UCX' was not created: NIXL_ERR_BACKEND": "NIXL backend error",
    "prepXferDlist: failed to prepare transfer descriptor list": "NIXL could not prepare a transfer",
    "[gpu-node-3:12345:0:12399] Caught signal 11 (Segmentation fault: invalid permissions for mapped object at address "
    "0x7f00deadbeef)": "segmentation fault (UCX)",
    "/sgl-workspace/nvshmem/src/host/transport/transport.cpp:400: non-zero status: 7 connect EPS failed":
        "NVSHMEM could not connect to its peers (DeepEP)",
    "nvshmem setup connections failed": "NVSHMEM could not connect to its peers (DeepEP)",
    "ibv_modify_qp failed": "NVSHMEM could not connect to its peers (DeepEP)",
    "NVSHMEM API called before NVSHMEM initialization has completed": "NVSHMEM used before it was set up (DeepEP)",
    "RuntimeError: CUDA error: an illegal memory access was encountered": "CUDA error: an illegal memory access",
    "torch.AcceleratorError: CUDA error: unspecified launch failure": "CUDA error: unspecified launch failure",
    "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1478: indexSelectSmallIndex: block: [0,0,0], thread: [0,0,0] "
    "Assertion `srcIndex < srcSelectDimSize` failed.": "a CUDA kernel's assert failed (device-side assert)",
    "[E1203 10:11:12.345 socket.cpp:1011] [c10d] waitForInput: poll for socket SocketImpl(fd=12) returned 0, likely a "
    "timeout": "the distributed rendezvous timed out (c10d)",
    "[c10d] The client socket has timed out after 600000ms while trying to connect to (10.0.0.1, 29500).":
        "the distributed rendezvous timed out (c10d)",
    "RuntimeError: PD Disaggregation does NOT support PD different TP sizes for non-MLA hybrid models yet.":
        "prefill and decode have different TP sizes, which this SGLang cannot pair",
    "[2026-06-09 11:38:46] Rank 0 scheduler is dead. Please check if there are relevant logs.": "a scheduler died",
    "Exception: Capture cuda graph failed: CUDA error: out of memory": "CUDA graph capture failed",
    # A server over several nodes, when another rank died or never came (sglang#7458, #3226, #3836, #3932).
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:45623":
        "a peer rank's connection closed (gloo): another node of this server died",
    "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error":
        "the ranks could not connect to each other (gloo)",
    "[rank3]:[E1203 10:21:12.345 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1042, OpType=ALLREDUCE, NumelIn=7168, NumelOut=7168, Timeout(ms)=600000) ran for 600077 "
    "milliseconds before timing out.": "a collective timed out (NCCL's watchdog): a rank of this server stopped answering",
    "[rank3]:[E1203 10:21:12.346 ProcessGroupNCCL.cpp:1785] [PG 0 (default_pg) Rank 3] Exception (either an error or "
    "timeout) detected by watchdog at work: 1042, last enqueued NCCL work: 1042": "NCCL operations failed or timed out",
    "[rank3]:[E1203 10:21:12.347 ProcessGroupNCCL.cpp:630] Some NCCL operations have failed or timed out. Due to the "
    "asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.":
        "NCCL operations failed or timed out",
    "[2026-12-05 10:21:12] Scheduler or DataParallelController 4242 terminated with -9":
        "this rank's scheduler ended",
}


@pytest.mark.parametrize("line", FATAL)
def test_fatal_lines_of_every_generation(line):
    assert SGLANG.failure(line).reason == FATAL[line]


LOOK_BAD_ONLY = [
    "[2026-05-01 10:00:00] ERROR:    Exception in ASGI application",
    "Traceback (most recent call last):",
    "[2026-05-01 10:00:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
    "Prefill register attempt 1/5 failed: Cannot connect to host 10.0.0.1:8998",
    "Error fetching prefill parallel info from bootstrap: Cannot connect to host 10.0.0.1:8998",
    "Decode handshake failed for request rank=0 decode_req.req.rid='x' decode_req.req.bootstrap_room=7",
    "Prefill bootstrap failed for request rank=0 req.rid='x' req.bootstrap_room=7",
    "Prefill transfer failed for request rank=0 req.rid='x' ... Decode instance could be dead",
    "Decode transfer failed for request rank=0 ... it might be dead",
    "[2026-05-01 10:00:00] WARNING:  Invalid HTTP request received.",
    "Endpoint '/get_model_info' is deprecated and will be removed in a future version.",
    # Lines real users' servers printed while they went on serving.
    "KVTransferError(bootstrap_room=8262737838237): Aborted by AbortReq.",
    "[2026-06-09 11:38:45 TP0] Request 7f3a KV waiting timeout after 300s, aborting it",
    "Ignore import error when loading sglang.srt.models.deepseek_nextn: No module named 'x'",
    "UCX  WARN  UCX version is incompatible, required: 1.19, actual: 1.18 (release 0)",
    "gpu-node-3:12345:12399 [0] NCCL INFO Channel 00/24 : 0[0] -> 1[1] via P2P/CUMEM",
    "I1203 10:11:12.345678 4242 transfer_engine.cpp:486] Metrics reporting is disabled",
    "FakeKVSender init with kv_indices: 64, aux_index: 0",
    "FakeKVReceiver poll: KVPoll.Success",
    'INFO:     127.0.0.1:51234 - "GET / HTTP/1.1" 404 Not Found',
    'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
    "No RDMA devices found, Mooncake falls back to TCP",
]


@pytest.mark.parametrize("line", LOOK_BAD_ONLY)
def test_lines_that_only_look_bad_never_fail(line):
    assert SGLANG.failure(line) is None
    assert SGLANG.kind(line) is not LineKind.FAIL


@pytest.mark.parametrize(("line", "reason"), [
    ("[2026-06-09 12:03:12 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)",
     "the scheduler's watchdog fired (a forward pass or a collective is stuck)"),
    ("[2026-06-09 12:03:13 TP0] Pyspy dump for PID 4242:", "SGLang dumped its stacks (py-spy): it found itself stuck"),
    # sglang#2561: a rank >= 1 that cannot reach rank 0's --dist-init-addr retries, and says so, until c10d gives up.
    ("[W1203 10:11:12.345 socket.cpp:755] [c10d] TCP client failed to connect/validate to host 10.0.0.1:5757 - "
     "retrying (try=0, timeout=600000ms, delay=1000ms): The client socket has timed out after 600000ms while trying "
     "to connect to (10.0.0.1, 5757).",
     "this rank cannot reach the rendezvous at rank 0's --dist-init-addr (c10d, retrying)"),
])
def test_a_server_that_says_it_is_stuck_is_a_hang_warning_not_a_failure(line, reason):
    found = SGLANG.signature(line)
    assert (found.severity, found.reason) == (Severity.HANG, reason)
    assert SGLANG.failure(line) is None and SGLANG.kind(line) is LineKind.WARN


def test_transfer_errors_are_their_own_kind():
    found = SGLANG.signature("Decode transfer failed for request rank=0 decode_req.req.rid='x'")
    assert found.severity is Severity.TRANSFER


@pytest.mark.parametrize("line", [
    "Could not fetch prefill parallel info from 10.0.0.1:8998 after 5 attempts",
    "Decode transfer failed for request rank=0 decode_req.req.rid='x' decode_req.req.bootstrap_room=7 with exception "
    "KVTransferError(bootstrap_room=7): Could not fetch prefill parallel info from bootstrap_addr: 10.0.0.1:8998"])
def test_a_prefill_a_decode_cannot_reach_fails_its_requests_not_the_decode(line):
    """SGLang 0.5.23 aborts that prefill's requests and serves on: a broken pair, not a dead server."""
    found = SGLANG.signature(line)
    assert found.severity is Severity.TRANSFER and SGLANG.failure(line) is None


def test_a_fatal_line_outranks_any_warning_on_the_same_line():
    line = "Scheduler hit an exception: Traceback (most recent call last):"
    assert SGLANG.signature(line).severity is Severity.FATAL


def test_docs_table_is_made_from_the_signatures():
    from pathlib import Path

    from pdtui.servers.sglang.signatures import markdown_table
    doc = (Path(__file__).parents[2] / "docs" / "signatures.md").read_text()
    assert markdown_table() in doc, "docs/signatures.md is stale: python -m pdtui.servers.sglang.signatures"


@pytest.mark.parametrize("generation", ["older", "2025", "current"])
def test_the_sims_wording_is_judged_as_sglangs_own(generation):
    from pdtui.sim.wording import WORDINGS
    words = WORDINGS[generation]
    for role in ("prefill", "decode"):
        assert SGLANG.failure(words.warmup_failure(role)).reason == "PD warm-up failed"
    assert all(SGLANG.signature(line).check == "warm-up" for line in words.warmup_ok)
    assert SGLANG.failure(words.sigquit).reason == "a server process died"
    if words.bootstrap_started:
        assert SGLANG.signature(words.bootstrap_started.format(host="0.0.0.0", port=8998)).check == "bootstrap"
    for line in (words.graph_begin, words.graph_end, words.warmup_start):
        assert SGLANG.signature(line) is None


_WORDS = st.text(alphabet="ab.|()*\\ x", min_size=1, max_size=6)


@given(literals=st.lists(_WORDS, min_size=1, max_size=4), text=st.text(alphabet="ab.|()*\\ x", max_size=30))
def test_the_literal_prefilter_answers_as_the_regexes_do(literals, text):
    from pdtui.engine.readiness import Prefilter
    patterns = [re.compile(re.escape(word)) for word in literals]
    assert Prefilter(patterns).hits(text) == [i for i, p in enumerate(patterns) if p.search(text)]


def every_signature_searched(judge: LineJudge, line: str):
    matched = [s for s in judge.signatures if s.pattern.search(line)]
    return max(matched, key=lambda s: (s.severity is Severity.FATAL, s.rank)) if matched else None


KNOWN_LINES = [*FATAL, *LOOK_BAD_ONLY, *WARMUP_FAILURES.values(), *WARMUP_SUCCESSES.values()]


@pytest.mark.parametrize("line", KNOWN_LINES)
def test_the_signatures_the_prefilter_names_find_what_searching_every_signature_finds(line):
    assert SGLANG.signature(line) is every_signature_searched(SGLANG, line)


@given(st.lists(st.sampled_from(KNOWN_LINES), min_size=2, max_size=4), st.sampled_from(["", " ", ": "]))
def test_a_line_holding_several_signatures_texts_is_judged_as_searching_every_signature_judges(lines, glue):
    line = glue.join(lines)
    assert SGLANG.signature(line) is every_signature_searched(SGLANG, line)
