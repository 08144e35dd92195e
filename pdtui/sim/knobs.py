"""The sim's knobs (the worker's failure modes, the demo's shapes), in one light module: ``--help`` of pdtui
and of the sim read them without importing the worker or the demo."""

from __future__ import annotations

# What each --fail mode plays; some only look bad while the server goes on serving (a request's traceback,
# per-request transfer errors).
FAIL_MODES: dict[str, str] = {
    "oom": "CUDA out of memory while capturing CUDA graphs (the scheduler dies)",
    "nccl": "an NCCL error at start-up (the scheduler dies)",
    "mooncake": "Mooncake cannot register the KV cache's memory (the locked-memory limit): the scheduler's "
                "traceback names it on its last line",
    "warmup-failed": "the PD warm-up fails; the ready line comes anyway and /health answers 200",
    "crash-after-ready": "the scheduler crashes a second after the ready line",
    "scheduler-killed": "a second after the ready line the scheduler is killed (SIGKILL): 0.5.23 says which of its "
                        "processes died, then kills its whole tree, itself last",
    "small-kv-pool": "the KV pool holds fewer tokens than one full-length request: 0.5.23 warns and goes on; a "
                     "decode then waits in its PD warm-up for room that never comes",
    "hang": "start-up stops in CUDA graph capture, before the HTTP server is up",
    "hang-dist": "start-up stops in distributed init (an NCCL or c10d rendezvous that never completes)",
    "hang-warmup": "the PD warm-up never completes: the server is up, the ready line never comes",
    "crash": "a traceback no signature knows, then the process exits 1 (only its exit tells)",
    "port-in-use": "the HTTP port is taken (uvicorn cannot bind)",
    "generate-500": "every generation answers 500",
    "generate-fails-later": "once serving, generations answer 500 for a while, then succeed again (the "
                            "router's canary degrades it, then restores it)",
    "server-info-hangs": "its /server_info never answers (its scheduler busy elsewhere, as in PD bootstrap polling): "
                         "ready by its own checks, but the router cannot read its metadata and never takes it",
    "bootstrap-port-in-use": "a prefill's bootstrap port is taken: Server error: logged, the server goes on",
    "request-traceback": "one request raises after ready (Exception in ASGI application); serving goes on",
    "transfer-errors": "every routed request's KV transfer fails (logged per request, answered 500)",
    "transfer-errors-later": "once serving, every routed request's KV transfer fails for a while, as "
                             "transfer-errors does, then succeeds again",
    "transfer-stalls": "from --fail-after seconds past the first generation served (for --fail-for seconds, if "
                       "given), every routed request's KV transfer stalls: it stays in the transfer phase (a "
                       "decode's transfer queue, a prefill's inflight queue) and never completes, no line logged",
    "reasoning-only": "a reasoning parser's answer: every token in reasoning_content, content null (older) or "
                      "empty: a real generation",
    "empty-200": "generations answer HTTP 200 with no tokens (finish_reason abort, SGLang's graceful abort)",
}

# What the demo plays across its services rather than in one worker.
DEMO_FAIL_MODES: dict[str, str] = {
    "broken-pair": "a decode cannot reach the first prefill's bootstrap server (a firewall between the two): "
                   "every request routed through that pair fails, the others succeed",
    "page-size": "a decode started with --page-size 128 while the prefills run 64: the preflight refuses the "
                 "pair before anything starts (--force starts it anyway)",
}
# What --fail fabric:MODE breaks in the demo host's sysfs (sim/sysfs.py), for the preflight's fabric check to find.
FABRIC_FAIL_MODES: dict[str, str] = {
    "port-down": "every RDMA port of the host is down: the preflight refuses the servers that name the devices",
    "no-device": "the host has no RDMA device: the devices the servers name are not there, and they are refused",
    "no-peermem": "nvidia_peermem is not loaded: the preflight warns that GPU memory cannot be registered",
    "numa": "each NIC sits on the other NUMA node than the GPUs of the servers that name it: a warning",
}
SHAPES = ("1p1d", "1p2d", "2p2d")   # the demo's prefills and decodes: one and one, one and two, two and two

GENERATIONS = ("older", "2025", "current")
DEFAULT_GENERATION = "current"
DEFAULT_MODEL = "deepseek-ai/DeepSeek-V4-Flash"   # the reference deployment's model, which the sim plays
FAIL_AFTER = 5.0    # the *-later modes: seconds from the first generation served until generations fail
FAIL_FOR = 20.0     # ... and for how long they do
