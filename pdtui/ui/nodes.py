"""A server over several nodes as one panel: which rank speaks for it, each node's row, each node's log label.

Pure functions of the ranks' :class:`~pdtui.ui.model.ServiceView` (rank 0 first): the panel
(ui/panel.py) draws what they return. A wide server lives and fails as one, so its badge is
the rank furthest from serving (a rank that failed, else one still on its way), and its
pinned line names that rank and its node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pdtui.config.fields import format_duration, format_elapsed
from pdtui.engine.events import ServiceInfo
from pdtui.engine.states import ServiceState
from pdtui.gpus.inventory import GpuInfo
from pdtui.gpus.nvidia_smi import gpu_ranges
from pdtui.servers import serving_named
from pdtui.ui.format import gpu_gauges
from pdtui.ui.model import ServiceView

S = ServiceState
LEAD_ORDER: tuple[ServiceState, ...] = (S.FAILED, S.TIMED_OUT, S.STOPPING, S.BLOCKED, S.PENDING, S.QUEUED,
                                        S.STARTING, S.WAITING, S.DEGRADED, S.READY, S.STOPPED)
"""The rank that speaks for its server is the first in this order: a failure, then the rank furthest from serving."""
QUIET_AFTER = 60.0
"""A starting rank silent this long shows how long in its row: the engine's stall warning comes later, in its words."""
GAUGE_ROOM = 28
"""Cells a node's row gives its GPUs' memory gauges."""


def node_labels(infos: Sequence[ServiceInfo]) -> list[str]:
    """Each rank's label in its server's log: its host, or ``RANK:HOST`` where two ranks share a host."""
    hosts = [info.host for info in infos]
    if len(set(hosts)) == len(hosts):
        return hosts
    return [f"{info.rank}:{info.host}" for info in infos]


def where(info: ServiceInfo) -> str:
    """``rank 1 on gpu-b``: a rank as the user finds it, by its node."""
    return f"rank {info.rank} on {info.host}"


def lead(ranks: Sequence[ServiceView], cause: str | None = None) -> ServiceView:
    """The rank that speaks for its server: the one the engine blamed for its failure while it is still failed,
    else the first (by rank) whose state comes first in :data:`LEAD_ORDER`."""
    blamed = next((view for view in ranks if view.info.name == cause), None)
    if blamed is not None and blamed.state in (S.FAILED, S.TIMED_OUT):
        return blamed
    return min(ranks, key=lambda view: LEAD_ORDER.index(view.state))


def pinned(ranks: Sequence[ServiceView], cause: str | None = None) -> tuple[str, str | None]:
    """The line under the server's header: its leading rank's, after the words that name that rank's node when it
    is not rank 0 (rank 0's reason then only says that another failed): ``("rank 1 on gpu-b: ", line)``."""
    view = lead(ranks, cause)
    return ("" if view is ranks[0] or view.pinned is None else f"{where(view.info)}: "), view.pinned


def node_line(view: ServiceView, now: float, gpus: Sequence[GpuInfo] = (), last_line: float | None = None) -> str:
    """One rank's row: ``rank 1 gpu-b  GPU 0-7  ◐ waiting 4:30  dist 4:12… · no line for 4m``.

    Its GPUs' memory gauges once sampled, else their indices; its badge; the phase under way and how long it has
    run; and, while it starts, how long it has been silent (since ``last_line``, or its start) when that is a minute
    or more."""
    info = view.info
    if gpus:
        placed = gpu_gauges(list(gpus), GAUGE_ROOM)
    else:
        placed = f"GPU {gpu_ranges(info.gpus)}" if info.gpus else ""
    parts = [f"rank {info.rank} {info.host}", placed, view.badge(now)]
    starting = view.state in (S.STARTING, S.WAITING)
    if starting and view.phases and view.phases[-1][0] != "ready":
        running = view.running(now)
        label = serving_named(info.engine).phase_labels.get(view.phases[-1][0], view.phases[-1][0])
        parts.append(f"{label} {format_elapsed(running)}" if running is not None else label)
    heard = max((at for at in (last_line, view.since) if at is not None), default=None)
    if starting and heard is not None and now - heard >= QUIET_AFTER:
        parts.append(f"no line for {format_duration(60 * int((now - heard) // 60))}")
    return "  ".join(part for part in parts if part)


def node_lines(ranks: Sequence[ServiceView], now: float, gpus: Mapping[str, Sequence[GpuInfo]],
               last_lines: Mapping[str, float]) -> str:
    """Every rank's row, rank 0 first: ``gpus`` (their newest readings) and ``last_lines`` (when its newest line
    came) by its service."""
    return "\n".join(node_line(view, now, gpus.get(view.info.name, ()), last_lines.get(view.info.name))
                     for view in ranks)
