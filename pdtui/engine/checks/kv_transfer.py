"""The KV path seen in the servers' own figures: their transfer series read before and after a generation.

A prefill that moved a request's KV to its decode observes the transfer in
``sglang:kv_transfer_latency_ms`` and ``sglang:kv_transfer_total_mb``
(histograms, one series per TP rank, from SGLang 0.5.x with
``--enable-metrics``); either side counts what failed in
``sglang:num_transfer_failed_reqs_total`` and
``sglang:num_bootstrap_failed_reqs_total``. Other requests may be running
(the demo's load): a rise proves the path moved KV, never how much one
request moved, so the words say what rose and by how much, over all ranks.
Reading the series from a server's text is its serving engine's
(servers/sglang/metrics.py ``kv_totals``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from pdtui.support.text import megabytes as format_size
from pdtui.vocabulary.figures import KvTotals

# Each counting server's totals by service (its serving engine says which side counts); None: no /metrics.
KvReading = Mapping[str, "KvTotals | None"]
KvMeter = Callable[[], Awaitable[KvReading]]


@dataclass(frozen=True, slots=True)
class KvSeen:
    """What the series say of what happened between two readings."""

    failed: bool        # a failure counter rose
    moved: bool         # a prefill observed a transfer
    words: str


def kv_seen(before: KvReading, after: KvReading) -> KvSeen:
    """What the series say of the generation between two readings, in words for its check line."""
    failures, moved, into = [], [], False
    for service, now in after.items():
        then = before.get(service)
        if now is None or then is None:
            continue
        for label, rise in (("KV transfer failed", now.failed - then.failed),
                            ("bootstrap failed", now.bootstrap_failed - then.bootstrap_failed)):
            if rise > 0:
                failures.append(f"{label} on {service} (+{rise:g})")
        if now.transfers > then.transfers:
            moved.append((service, now.megabytes - then.megabytes))
            into = into or now.side == "decode"
    if failures:
        return KvSeen(True, bool(moved), "; ".join(failures))
    if moved:
        megabytes = sum(mb for _, mb in moved)
        return KvSeen(False, True, f"KV moved prefill→decode, {format_size(megabytes)} {'into' if into else 'from'} "
                                   f"{', '.join(s for s, _ in moved)}")
    if not any(totals is not None and totals.exported for totals in after.values()):
        return KvSeen(False, False, "KV path proven by tokens only (no server exports its KV transfer series)")
    return KvSeen(False, False, "KV path proven by tokens only (the servers' KV transfer series did not move)")
