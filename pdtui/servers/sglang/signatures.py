"""What SGLang's and the router's log lines mean, for every generation pdtui knows.

Pure data, one home: the judge (readiness.py) reads it, docs/signatures.md is
made from it (``python -m pdtui.servers.sglang.signatures``, checked by a test), and
the sim prints the same wording (sim/wording.py).

A line is one of four kinds of news:

- **fatal**: the process is going down, or PD can never work: the service
  fails at once (a warm-up failure line decides, whatever ``/health`` answers
  afterwards: SGLang prints its ready line and answers 200 after one).
- **warning**: looks bad but the server goes on serving (a request's own
  traceback, uvicorn's ``Exception in ASGI application``). It fails a service
  only together with a fatal line, a dead unit or health that keeps failing,
  and is then quoted as the evidence.
- **transfer**: a per-request KV transfer error once serving: a warning that
  names the service; during the router's smoke request it fails that step.
- **evidence**: good news that proves a check (the PD warm-up succeeded, the
  prefill's bootstrap server is up).

The generations are SGLang's: ``older`` (0.4.7-0.4.10, 2025), ``2025``
(0.5.0-0.5.x of 2025) and ``current`` (2026, 0.5.23 and its neighbours);
``all`` where the wording never changed.
"""

from __future__ import annotations

from pdtui.servers import signature_table
from pdtui.servers.signature_table import SignatureTable, access_line
from pdtui.vocabulary.signatures import Severity, Signature, signature

W, T, E, H = Severity.WARNING, Severity.TRANSFER, Severity.EVIDENCE, Severity.HANG
# What to check next, from SGLang's troubleshooting guide and Mooncake's (RDMA resource initialization).
OOM_ADVICE = ("lower --mem-fraction-static; a prefill also --chunked-prefill-size, a decode --max-running-requests "
              "(SGLang's troubleshooting guide)")
MEMLOCK_ADVICE = ("raise the unit's locked-memory limit: LimitMEMLOCK=infinity, as ulimit -l unlimited "
                  "(Mooncake's troubleshooting guide)")
WARM_UP, BOOTSTRAP = "warm-up", "bootstrap"
BOOTSTRAP_FAILED = "bootstrap server failed"
# What a rank says when another rank of its server went first: a consequence; the other rank's failure is the cause.
PEER_CLOSED = "a peer rank's connection closed (gloo): another node of this server died"
PEER_SILENT = "a collective timed out (NCCL's watchdog): a rank of this server stopped answering"
PEER_LOST = (PEER_CLOSED, PEER_SILENT, "Connection closed by peer", "Watchdog caught collective operation timeout")
_COMPONENTS = "TokenizerManager|DetokenizerManager|DataParallelController|MultiTokenizerRouter|MultiDetokenizerRouter"

SGLANG_SIGNATURES: tuple[Signature, ...] = (
    # The PD warm-up, in its three generations of wording.
    signature(r"End of prefill warmup with status (?!200\b)\d+", "PD warm-up failed", 9, generations="older",
         hint="End of prefill warmup with status"),
    signature(r"warm Up Failed", "PD warm-up failed", 9, generations="2025"),
    signature(r"Disaggregation warmup failed", "PD warm-up failed", 9, generations="current"),
    signature(r"End of prefill warmup with status 200\b", "PD warm-up succeeded", 0, E, "older",
         hint="End of prefill warmup with status", check=WARM_UP),
    signature(r"End of prefill disaggregation mode warmup with status 200", "PD warm-up succeeded", 0, E, "2025",
         check=WARM_UP),
    signature(r"Disaggregation warmup requests? completed|End of disaggregation warmup", "PD warm-up succeeded", 0, E,
         "current", hint="isaggregation warmup", check=WARM_UP),
    signature(r"Initialization failed", "initialization failed (the warm-up raised)", 5),
    # Memory, communication, ports, transfer engines.
    signature(r"CUDA out of memory|OutOfMemoryError", "CUDA out of memory", 9, advice=OOM_ADVICE),
    signature(r"Not enough memory", "not enough GPU memory", 9,
              advice="raise --mem-fraction-static (SGLang's own message)"),
    signature(r"Capture cuda graph failed", "CUDA graph capture failed", 8),
    signature(r"NCCL error", "NCCL error", 9,
              advice="set NCCL_DEBUG=INFO in the unit's environment for NCCL's details (NCCL's own message)"),
    signature(r"error while attempting to bind on address", "HTTP port already in use", 9),
    signature(r"address already in use|Address already in use", "port already in use", 8),
    signature(r"Mooncake Transfer Engine initialization failed", "Mooncake transfer engine failed to start", 8),
    signature(r"Please install mooncake|Please install NIXL", "KV transfer backend not installed", 8),
    signature(r"NIXL_ERR_BACKEND", "NIXL backend error", 8),
    # Before any process starts, as real 0.5.23 refused them (its last line, ending its traceback).
    signature(r"Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
              "model not found: no such folder (SGLang took the path for a Hub repo id)", 9, hint="Repo id must be"),
    signature(r"Prefill server does not support 'fake' as the transfer backend",
              "SGLang's prefill refuses the fake transfer backend (fake moves no KV: a decode's alone)", 9,
              hint="does not support 'fake'"),
    # Transfer engines, DeepEP/NVSHMEM, CUDA and the rendezvous, as real users' servers printed them. A wording
    # that usually ends a traceback ranks below the traceback's header: the header's reason is then completed
    # with it (scheduler crashed (TP5): RuntimeError: Mooncake memory registration failed.); alone, it decides.
    signature(r"Mooncake memory registration failed", "Mooncake could not register the KV cache's memory", 3,
              advice=MEMLOCK_ADVICE),
    signature(r"\] Failed to register memory", "the transfer engine could not register memory for RDMA", 8,
              hint="Failed to register memory", advice=MEMLOCK_ADVICE),
    signature(r"NIXL_ERR_NOT_FOUND", "NIXL: an agent or a memory region was not found", 3),
    signature(r"prepXferDlist: failed to prepare", "NIXL could not prepare a transfer", 7),
    signature(r"Caught signal 11 \(Segmentation fault", "segmentation fault (UCX)", 8, hint="Caught signal 11"),
    signature(r"connect EPS failed|nvshmem setup connections failed|ibv_modify_qp failed",
              "NVSHMEM could not connect to its peers (DeepEP)", 8),
    signature(r"NVSHMEM API called before NVSHMEM initialization", "NVSHMEM used before it was set up (DeepEP)", 8),
    signature(r"CUDA error: an illegal memory access", "CUDA error: an illegal memory access", 3,
              advice="a kernel's error or out of memory; if memory, see the CUDA out of memory advice "
                     "(SGLang's troubleshooting guide)"),
    signature(r"CUDA error: unspecified launch failure", "CUDA error: unspecified launch failure", 3),
    signature(r"\.cu:\d+: .*Assertion `.*` failed", "a CUDA kernel's assert failed (device-side assert)", 8,
              hint="Assertion `"),
    signature(r"\[c10d\](?!.* - retrying).*(?:likely a timeout|timed out after \d+ ?ms)",
              "the distributed rendezvous timed out (c10d)", 8, hint="[c10d]"),
    # A server over several nodes: its ranks reach each other at rank 0's --dist-init-addr, then talk in
    # collectives. SGLang tells no other node when one dies: the others learn at their next collective.
    signature(r"\[c10d\] TCP client failed to connect/validate to host .* - retrying",
              "this rank cannot reach the rendezvous at rank 0's --dist-init-addr (c10d, retrying)", 2, H,
              hint="TCP client failed to connect"),
    signature(r"Gloo connectFullMesh failed", "the ranks could not connect to each other (gloo)", 3),
    signature(r"gloo.*Connection closed by peer", PEER_CLOSED, 3, hint="Connection closed by peer"),
    signature(r"Watchdog caught collective operation timeout", PEER_SILENT, 8),
    signature(r"Some NCCL operations have failed or timed out|Exception \(either an error or timeout\) detected by "
              r"watchdog", "NCCL operations failed or timed out", 7),
    signature(r"Scheduler or DataParallelController \d+ terminated with", "this rank's scheduler ended", 5,
              hint="terminated with"),
    signature(r"PD Disaggregation does NOT support PD different TP sizes",
              "prefill and decode have different TP sizes, which this SGLang cannot pair", 3),
    # A process of the server died.
    signature(r"Scheduler hit an exception", "scheduler crashed", 4),
    signature(rf"(?:{_COMPONENTS}) hit an exception", "a server process crashed", 4, hint="hit an exception"),
    signature(r"Received sigquit from a child proces", "a server process died", 3),
    # 0.5.23 once running (its tokenizer manager's handler; the one above is its launch phase's)
    signature(r"SIGQUIT received\..*It usually means one child failed", "a server process died", 3, generations="current",
              hint="SIGQUIT received."),
    signature(r"Child process unexpectedly failed", "a server process died", 3, generations="current"),
    # 0.5.23's watchdog of its processes, as a real one said when its scheduler was killed (SIGKILL: exit code -9);
    # it then kills its whole tree, itself last.
    signature(r"Subprocess \S+ \(pid=\d+\) crashed with exit code -?\d+", "a server process died", 5, generations="current",
              hint="Subprocess "),
    signature(r"Rank \d+ scheduler is dead", "a scheduler died", 3, hint="scheduler is dead"),
    signature(r"failed with an exit code \d+\. pid=", "a server process died", 3, generations="older",
         hint="failed with an exit code"),
    # The prefill's bootstrap server, and the two sides that need it.
    signature(r"(?:^|\] )Server error: ", BOOTSTRAP_FAILED, 10, hint="Server error: "),
    signature(r"CommonKVBootstrapServer started successfully", "bootstrap server up", 0, E, "current", check=BOOTSTRAP),
    signature(r"Prefill instance failed to register to bootstrap server|Prefill Failed to register to bootstrap server",
         "the prefill cannot register with its bootstrap server", 7),
    # The server says it is stuck: a warning naming the phase it is in (the timeout decides).
    signature(r"Scheduler watchdog timeout", "the scheduler's watchdog fired (a forward pass or a collective is stuck)",
              2, H),
    signature(r"Pyspy dump for PID", "SGLang dumped its stacks (py-spy): it found itself stuck", 1, H),
    # Lines that look bad while the server goes on serving.
    signature(r"Traceback \(most recent call last\)", "Python traceback", 1, W),
    signature(r"Exception in ASGI application", "a request failed", 1, W),
    signature(r"Health check failed", "a health check got no answer in time", 2, W),
    signature(r"KV pool holds \d+ tokens, fewer than --context-length",
              "the KV pool is smaller than one full-length request: long requests are refused", 2, W, "current",
              hint="KV pool holds "),
    signature(r"Prefill register attempt \d+/\d+ failed", "a bootstrap registration attempt failed", 1, W, "current",
         hint="Prefill register attempt"),
    signature(r"Error fetching prefill (?:parallel |server )?info from bootstrap", "a bootstrap look-up failed", 1, W,
         hint="Error fetching prefill"),
    signature(r"Decode handshake failed for request", "KV transfer error", 6, T),
    signature(r"Prefill bootstrap failed for request", "KV transfer error", 6, T),
    signature(r"Prefill transfer failed", "KV transfer error", 6, T),
    signature(r"Decode transfer failed", "KV transfer error", 6, T),
    # 0.5.x aborts the requests of a prefill whose bootstrap server a decode cannot reach and serves on (a pair that
    # cannot transfer: the pairs check names it); a release that crashed after it says so in its own fatal line.
    signature(r"Could not fetch prefill parallel info", "decode cannot reach the prefill's bootstrap server", 6, T),
)

ROUTER_SIGNATURES: tuple[Signature, ...] = (
    signature(r"address already in use|Address already in use", "port already in use", 9),
    signature(r"panicked at", "router panicked", 8),
)


def request_line(message: str) -> bool:
    """A line that only records one HTTP request answered: a server's access line (uvicorn's ``"GET /health
    HTTP/1.1" 200 OK``) or a router's request span (``http_request{method=GET path=/workers ...}:
    smg::request: ... started processing request``, both routers alike). Whoever asked, it is no news of how
    the start-up goes: a router logs each of pdtui's own probes so."""
    if "http_request" in message:
        return "smg::request" in message or "smg::response" in message
    return access_line(message)


TABLE = SignatureTable(SGLANG_SIGNATURES, ROUTER_SIGNATURES, request_line, PEER_LOST)
signatures_for = TABLE.signatures_for


def markdown_table() -> str:
    """The signature table of docs/signatures.md."""
    return signature_table.markdown_table("generation", (
        (who, s, s.generations) for who, signatures in (("SGLang", SGLANG_SIGNATURES), ("router", ROUTER_SIGNATURES))
        for s in signatures))


if __name__ == "__main__":
    print(markdown_table(), end="")
