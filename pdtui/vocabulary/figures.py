"""What a server's figures say: its live :class:`Figures` (from its batch lines or its ``/metrics``), its KV
transfer series' :class:`KvTotals` and the requests its KV transfer queues hold (:class:`TransferQueues`).

Each serving engine reads them from its own servers' text (servers/sglang/metrics.py), and the engine samples them
(engine/figures.py), judges a generation by them (engine/checks/kv_transfer.py) and tells them to the faces
(engine/events.py's ``ServingFigures``): plain values here, below both, so neither imports the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Figures:
    """A serving server's live figures; None where its source does not say."""

    generation_tps: float | None = None    # generated tokens per second (decode)
    prompt_tps: float | None = None        # prompt tokens per second taken in (prefill)
    running: int | None = None
    queued: int | None = None
    token_usage: float | None = None       # of the KV cache, 0..1
    ttft_p50: float | None = None          # seconds, over the requests since the last sample
    requests_ps: float | None = None       # a router: requests routed per second
    latency_p50: float | None = None       # a router: seconds a routed request took, over the last interval
    open_circuits: int | None = None       # a router: workers its circuit breaker holds out
    kv_gbps: float | None = None           # a prefill: KV sent to decodes, GB/s over the last interval
    kv_failed: int | None = None           # KV transfers failed since it started (where its /metrics counts them)
    in_transfer: int | None = None         # requests held for a KV transfer: a prefill's not yet taken by their
                                           # decode, a decode's waiting for their KV (where its /metrics says)


@dataclass(frozen=True, slots=True)
class KvTotals:
    """One server's KV transfer series, summed over its ranks."""

    transfers: float = 0.0       # transfers observed (the latency histogram's count)
    megabytes: float = 0.0       # what they moved (the size histogram's sum)
    failed: float = 0.0          # requests whose transfer failed
    bootstrap_failed: float = 0.0
    exported: bool = True        # False: its /metrics has none of the series (yet: each appears once first used)
    side: str = "prefill"        # the side that counted them: the one that sent the KV, or that pulled it


@dataclass(frozen=True, slots=True)
class TransferStage:
    """One of a server's KV transfer queues: where its requests wait, in its engine's words, and how many."""

    queue: str          # the queue, as its gauge names it ("inflight queue")
    waits_for: str      # what a request there waits for, in the engine's words ("KVPoll.WaitingForInput: ...")
    requests: int


@dataclass(frozen=True, slots=True)
class TransferQueues:
    """A server's requests held for a KV transfer, by stage, and a count that rises whenever one moves on.

    ``moved`` adds up what the server has completed since it started (its transfers where it counts them, its
    requests finished): while it does not rise, the requests in its queues are the same requests, waiting.
    """

    stages: tuple[TransferStage, ...] = ()
    moved: float = 0.0

    @property
    def requests(self) -> int:
        return sum(stage.requests for stage in self.stages)
