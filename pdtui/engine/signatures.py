"""What SGLang's and the router's log lines mean, for every generation pdtui knows.

Pure data, one home: the judge (readiness.py) reads it, docs/signatures.md is
made from it (``python -m pdtui.engine.signatures``, checked by a test), and
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

import re
from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    FATAL = "fatal"
    WARNING = "warning"
    TRANSFER = "transfer"
    EVIDENCE = "evidence"


@dataclass(frozen=True, slots=True)
class Signature:
    """A kind of log line: its pattern, what it means, and how telling it is.

    When several fatal lines arrive together (a traceback, then the error it
    ends in), the most telling one (highest rank) names the failure. ``hint``
    is a literal that every matching line holds, for patterns that are more
    than literal text: the prefilter looks for it instead of running the regex
    on every line.
    """

    pattern: re.Pattern[str]
    reason: str
    rank: int
    severity: Severity = Severity.FATAL
    generations: str = "all"
    hint: str | None = None
    check: str | None = None        # the check an evidence line proves


def _sig(pattern: str, reason: str, rank: int = 5, severity: Severity = Severity.FATAL, generations: str = "all",
         hint: str | None = None, check: str | None = None) -> Signature:
    return Signature(re.compile(pattern), reason, rank, severity, generations, hint, check)


W, T, E = Severity.WARNING, Severity.TRANSFER, Severity.EVIDENCE
WARM_UP, BOOTSTRAP = "warm-up", "bootstrap"
BOOTSTRAP_FAILED = "bootstrap server failed"
_COMPONENTS = "TokenizerManager|DetokenizerManager|DataParallelController|MultiTokenizerRouter|MultiDetokenizerRouter"

SGLANG_SIGNATURES: tuple[Signature, ...] = (
    # The PD warm-up, in its three generations of wording.
    _sig(r"End of prefill warmup with status (?!200\b)\d+", "PD warm-up failed", 9, generations="older",
         hint="End of prefill warmup with status"),
    _sig(r"warm Up Failed", "PD warm-up failed", 9, generations="2025"),
    _sig(r"Disaggregation warmup failed", "PD warm-up failed", 9, generations="current"),
    _sig(r"End of prefill warmup with status 200\b", "PD warm-up succeeded", 0, E, "older",
         hint="End of prefill warmup with status", check=WARM_UP),
    _sig(r"End of prefill disaggregation mode warmup with status 200", "PD warm-up succeeded", 0, E, "2025",
         check=WARM_UP),
    _sig(r"Disaggregation warmup requests? completed|End of disaggregation warmup", "PD warm-up succeeded", 0, E,
         "current", check=WARM_UP),
    _sig(r"Initialization failed", "initialization failed (the warm-up raised)", 5),
    # Memory, communication, ports, transfer engines.
    _sig(r"CUDA out of memory|OutOfMemoryError", "CUDA out of memory", 9),
    _sig(r"Not enough memory", "not enough GPU memory", 9),
    _sig(r"Capture cuda graph failed", "CUDA graph capture failed", 8),
    _sig(r"NCCL error", "NCCL error", 9),
    _sig(r"error while attempting to bind on address", "HTTP port already in use", 9),
    _sig(r"address already in use|Address already in use", "port already in use", 8),
    _sig(r"Mooncake Transfer Engine initialization failed", "Mooncake transfer engine failed to start", 8),
    _sig(r"Please install mooncake|Please install NIXL", "KV transfer backend not installed", 8),
    _sig(r"NIXL_ERR_BACKEND", "NIXL backend error", 8),
    # A process of the server died.
    _sig(r"Scheduler hit an exception", "scheduler crashed", 4),
    _sig(rf"(?:{_COMPONENTS}) hit an exception", "a server process crashed", 4, hint="hit an exception"),
    _sig(r"Received sigquit from a child proces", "a server process died", 3),
    _sig(r"Child process unexpectedly failed", "a server process died", 3, generations="current"),
    _sig(r"failed with an exit code \d+\. pid=", "a server process died", 3, generations="older",
         hint="failed with an exit code"),
    # The prefill's bootstrap server, and the two sides that need it.
    _sig(r"(?:^|\] )Server error: ", BOOTSTRAP_FAILED, 10, hint="Server error: "),
    _sig(r"CommonKVBootstrapServer started successfully", "bootstrap server up", 0, E, "current", check=BOOTSTRAP),
    _sig(r"Prefill instance failed to register to bootstrap server|Prefill Failed to register to bootstrap server",
         "the prefill cannot register with its bootstrap server", 7),
    _sig(r"Could not fetch prefill parallel info", "decode cannot reach the prefill's bootstrap server", 7),
    # Lines that look bad while the server goes on serving.
    _sig(r"Traceback \(most recent call last\)", "Python traceback", 1, W),
    _sig(r"Exception in ASGI application", "a request failed", 1, W),
    _sig(r"Health check failed", "a health check got no answer in time", 2, W),
    _sig(r"Prefill register attempt \d+/\d+ failed", "a bootstrap registration attempt failed", 1, W, "current",
         hint="Prefill register attempt"),
    _sig(r"Error fetching prefill (?:parallel |server )?info from bootstrap", "a bootstrap look-up failed", 1, W,
         hint="Error fetching prefill"),
    _sig(r"Decode handshake failed for request", "KV transfer error", 6, T),
    _sig(r"Prefill bootstrap failed for request", "KV transfer error", 6, T),
    _sig(r"Prefill transfer failed", "KV transfer error", 6, T),
    _sig(r"Decode transfer failed", "KV transfer error", 6, T),
)

ROUTER_SIGNATURES: tuple[Signature, ...] = (
    _sig(r"address already in use|Address already in use", "port already in use", 9),
    _sig(r"panicked at", "router panicked", 8),
)

ROLE_SIGNATURES: dict[str, tuple[Signature, ...]] = {
    "prefill": SGLANG_SIGNATURES,
    "decode": SGLANG_SIGNATURES,
    "router": ROUTER_SIGNATURES,
    "other": (),
}

USER_RANK = 11   # a failure pattern the user wrote is the most telling of all


def signatures_for(role: str, extra: tuple[str, ...] = ()) -> tuple[Signature, ...]:
    """The role's signatures plus the user's own ``fail:`` patterns (fatal)."""
    user = tuple(_sig(p, f"matched fail pattern {p!r}", USER_RANK) for p in extra)
    return user + ROLE_SIGNATURES.get(role, ())


def markdown_table() -> str:
    """The signature table of docs/signatures.md."""
    rows = ["| signature (regex) | meaning | kind | generation | who |", "|---|---|---|---|---|"]
    for who, signatures in (("SGLang", SGLANG_SIGNATURES), ("router", ROUTER_SIGNATURES)):
        for s in signatures:
            pattern = s.pattern.pattern.replace("|", r"\|")
            rows.append(f"| `{pattern}` | {s.reason} | {s.severity.value} | {s.generations} | {who} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
