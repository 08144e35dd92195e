"""Small text formatters shared by the panels, the plan strip and the title bar."""

from __future__ import annotations

import re

from pdtui.config.fields import format_elapsed
from pdtui.engine.events import CanaryResult, JobStatus, ProbeResult, ServiceInfo, ServingFigures
from pdtui.engine.states import ServiceState
from pdtui.gpus.inventory import GpuInfo
from pdtui.support.text import inert, megabytes
from pdtui.vocabulary.figures import Figures

BADGE_LABELS: dict[ServiceState, str] = {
    ServiceState.PENDING: "○ pending",
    ServiceState.STARTING: "◔ starting",
    ServiceState.QUEUED: "◌ queued",
    ServiceState.WAITING: "◐ waiting",
    ServiceState.READY: "✓ READY",
    ServiceState.DEGRADED: "▼ DEGRADED",
    ServiceState.FAILED: "✗ FAILED",
    ServiceState.TIMED_OUT: "⧗ TIMED OUT",
    ServiceState.BLOCKED: "⊘ blocked",
    ServiceState.STOPPING: "◑ stopping",
    ServiceState.STOPPED: "■ stopped",
}
"""Badge text per state; the glyph keeps states apart when colour is off (NO_COLOR)."""

BAR_GLYPHS = " ▁▂▃▄▅▆▇█"

_DATED = re.compile(r"^(\[?)\d{4}-\d\d-\d\d[ T](\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?=[\] ])")
"""A line that opens with a date and time: SGLang's ``[2026-12-05 05:10:08 TP0]``, a router's
``2026-12-05 05:10:08  INFO``, an ISO ``2026-12-05T05:10:08.123Z``."""
_LEVEL_DATED = re.compile(r"^((?:\(\w+ pid=\d+\) )?[A-Z]+ )\d\d-\d\d (\d\d:\d\d:\d\d)(?= )")
"""vLLM's ``(APIServer pid=1) INFO 12-05 05:10:08 [file.py:1]``: the level, then the month and day."""


def service_title(info: ServiceInfo) -> str:
    """The panel title: name, role (when it adds something), unit (or job) @ host (or cluster)."""
    role = "" if info.role == info.name else f" ({info.role})"
    return f"{info.name}{role}  {'job ' if info.job else ''}{info.unit} @ {info.host}"


def placement(info: ServiceInfo, job: JobStatus | None = None, nodes: int = 1) -> str:
    """GPUs, NUMA node, port and dependencies as one short line; a job's id, node and the GPUs Slurm gave it (on
    each node, for a job over several). A server over several ``nodes`` says how many: each has a row of its own."""
    parts: list[str] = [f"{nodes} nodes"] if nodes > 1 else []
    if job is not None:
        parts.append(f"job {inert(job.job_id)} {inert(job.state)}" + (f" on {inert(job.node)}" if job.node else ""))
        if len(job.nodes) > 1:
            parts += [f"{inert(node)} GPU {' '.join(map(str, gpus))}" if gpus else inert(node) for node, gpus in job.nodes]
        elif job.gpus:
            parts.append("GPU " + " ".join(str(gpu) for gpu in job.gpus))
    if info.gpus and nodes == 1:
        parts.append("GPU " + " ".join(str(gpu) for gpu in info.gpus))
    if info.numa is not None and nodes == 1:
        parts.append(f"NUMA {info.numa}")
    if info.port is not None:
        parts.append(f":{info.port}")
    if info.after:
        parts.append("after " + ", ".join(info.after))
    return " · ".join(parts)


def _gib(mib: int) -> str:
    return f"{round(mib / 1024)}"


def _bar(used: int, total: int, cells: int) -> str:
    """A bar of ``cells`` block characters showing ``used/total`` in eighths of a cell."""
    steps = len(BAR_GLYPHS) - 1
    full, part = divmod(round(cells * steps * min(1.0, used / total)), steps)
    return (BAR_GLYPHS[-1] * full + BAR_GLYPHS[part].strip()).ljust(cells, "░")[:cells]


def gpu_gauge(gpu: GpuInfo, cells: int) -> str:
    """One GPU's chip: index, memory bar (``cells`` wide, 0 = none) and ``used/totalG``."""
    used, total = gpu.memory_used_mib, gpu.memory_total_mib
    if used is None or not total:
        return str(gpu.index)
    if cells == 0:
        return f"{gpu.index}:{_gib(used)}G"
    return f"{gpu.index} {_bar(used, total, cells)} {_gib(used)}/{_gib(total)}G"


def gpu_gauges(gpus: list[GpuInfo], width: int) -> str:
    """The widest rendering of every GPU's chip that fits in ``width`` cells."""
    for cells in (5, 3, 1, 0):
        line = "  ".join(gpu_gauge(gpu, cells) for gpu in gpus)
        if len(line) <= width:
            return line
    return " ".join(gpu_gauge(gpu, 0) for gpu in gpus)


# Checks whose passing words are worth their room (characters): what the smoke proved, where the KV went, the pairs.
TOLD_CHECKS = {"smoke": 48, "kv": 60, "pairs": 40}


def check_summary(checks: list[ProbeResult]) -> str:
    """The latest result of every readiness check, in the order they first ran, on one line.

    A passing check shows its latency, or (:data:`TOLD_CHECKS`) what it proved;
    a check that does not hold yet shows why.
    """
    parts = []
    for check in checks:
        if not check.ok:
            parts.append(f"○ {check.check}: {inert(check.detail, 120)}")
        elif check.check in TOLD_CHECKS:
            parts.append(f"✓ {check.check}: {inert(check.detail, TOLD_CHECKS[check.check])}")
        else:
            latency = f" {check.latency * 1000:.0f} ms" if check.latency is not None else ""
            parts.append(f"✓ {check.check}{latency}")
    return " · ".join(parts)


def canary_summary(canary: CanaryResult, now: float) -> str:
    """The router's latest canary: its latency (or why it failed) and how long ago it ran."""
    ago = f"{format_elapsed(now - canary.elapsed)} ago"
    if canary.ok:
        latency = f" {canary.latency * 1000:.0f} ms" if canary.latency is not None else ""
        return f"✓ canary{latency} ({ago})"
    return f"✗ canary ({ago}): {inert(canary.detail, 120)}"


def rate(tokens_per_s: float) -> str:
    """A token rate in three significant figures at most: ``812``, ``3.1k``, ``12k``."""
    if tokens_per_s >= 9999.5:
        return f"{tokens_per_s / 1000:.0f}k"
    if tokens_per_s >= 999.5:
        return f"{tokens_per_s / 1000:.1f}k"
    return f"{tokens_per_s:.0f}"


def figures_summary(event: ServingFigures) -> str:
    """A serving server's figures on one line: its throughput first (what moves), then load and latency."""
    figures = event.figures
    if figures.requests_ps is not None or figures.open_circuits is not None:
        return _router_summary(figures)
    parts = []
    if figures.generation_tps is not None:
        parts.append(f"{rate(figures.generation_tps)} tok/s")
    elif figures.prompt_tps is not None:
        parts.append(f"{rate(figures.prompt_tps)} prompt tok/s")
    if figures.running is not None:
        parts.append(f"{figures.running} running")
    if figures.queued is not None:
        parts.append(f"{figures.queued} queued")
    if figures.in_transfer:
        parts.append(f"{figures.in_transfer} in KV transfer")
    if figures.token_usage is not None:
        parts.append(f"KV {figures.token_usage * 100:.0f}%")
    if figures.ttft_p50 is not None:
        parts.append(f"TTFT p50 {_seconds(figures.ttft_p50)}")
    if figures.kv_gbps is not None:
        parts.append(f"KV {bandwidth(figures.kv_gbps)}")
    if figures.kv_failed is not None:
        parts.append(f"{figures.kv_failed} failed" if figures.kv_gbps is not None
                     else f"{figures.kv_failed} KV transfers failed")
    if event.hint:
        parts.append(event.hint)     # read from its batch lines: what would give the rest
    return " · ".join(parts)


def _router_summary(figures: Figures) -> str:
    parts = []
    if figures.requests_ps is not None:
        parts.append(f"{figures.requests_ps:.1f} req/s")
    if figures.running is not None:
        parts.append(f"{figures.running} in flight")
    if figures.latency_p50 is not None:
        parts.append(f"p50 {_seconds(figures.latency_p50)}")
    if figures.open_circuits:
        parts.append(f"{figures.open_circuits} circuit{'s' * (figures.open_circuits != 1)} open")
    return " · ".join(parts)


def bandwidth(gbps: float) -> str:
    """A transfer rate in two or three figures: ``12 GB/s``, ``1.2 GB/s``, ``71 MB/s``, ``4.0 MB/s``."""
    return f"{megabytes(gbps * 1024)}/s"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def throughput(event: ServingFigures) -> float:
    """The figure the sparkline follows: generated tokens per second, the prompt's on a prefill, a router's
    requests per second."""
    figures = event.figures
    for value in (figures.requests_ps, figures.generation_tps, figures.prompt_tps):
        if value is not None:
            return value
    return 0.0


def clock_only(line: str) -> str:
    """``line`` with the date dropped from the time it opens with, if it opens with one.

    A narrow panel's tail is today's lines: SGLang's ``[2026-12-05 05:10:08 TP0]`` takes 27 of 80 columns, its
    ``[05:10:08 TP0]`` 14. Only the opening stamp changes; the rest of the line is left as it is.
    """
    for stamp in (_DATED, _LEVEL_DATED):
        shortened, found = stamp.subn(r"\1\2", line, count=1)
        if found:
            return shortened
    return line
