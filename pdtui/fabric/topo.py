"""How a host's GPUs reach each other, as ``nvidia-smi topo -m`` says: asked only of a host where a prefill and a
decode of one pair move KV between GPUs on different NUMA nodes (the one question it answers that sysfs does not:
whether NVLink joins them, or the transfer crosses the CPUs' interconnect).

Each cell of the matrix is the path between two GPUs: ``NV#`` (# bonded NVLinks), ``SYS`` (PCIe and the SMP
interconnect between NUMA nodes), ``NODE``, ``PHB``, ``PXB``, ``PIX`` (PCIe within a node), ``X`` (itself).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pdtui.hosts.base import Host, HostError

COMMAND_TIMEOUT = 20.0
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CELL_SPLIT = re.compile(r"\t| {2,}")
_GPU = re.compile(r"GPU(\d+)")
_LINK = re.compile(r"X|NV\d+|SYS|NODE|PHB|PXB|PIX")


def parse_links(text: str) -> dict[tuple[int, int], str]:
    """(GPU, GPU) -> the path between them, from ``nvidia-smi topo -m``; what cannot be read is left out.

    Columns are tab separated, or padded with spaces when copied from a
    terminal; empty cells are dropped on both sides before lining a row up with
    the header (rows may carry one more than it), as gpus/nvidia_smi.parse_topo
    reads the same matrix.
    """
    columns: list[int | None] = []
    links: dict[tuple[int, int], str] = {}
    for raw in _ANSI.sub("", text).splitlines():
        cells = [cell.strip() for cell in _CELL_SPLIT.split(raw) if cell.strip()]
        if not cells:
            continue
        if "CPU Affinity" in cells or "NUMA Affinity" in cells:         # the header: GPU0 GPU1 ... NIC0 ...
            columns = [int(m[1]) if (m := _GPU.fullmatch(cell)) else None for cell in cells]
            continue
        row = _GPU.fullmatch(cells[0])
        if row is None or not columns:
            continue
        for column, cell in zip(columns, cells[1:], strict=False):
            if column is not None and _LINK.fullmatch(cell):
                links[(int(row[1]), column)] = cell
    return links


async def read_links(host: Host, nvidia_smi: Sequence[str], *,
                     timeout: float = COMMAND_TIMEOUT) -> dict[tuple[int, int], str] | None:
    """The host's GPU paths; None when nvidia-smi cannot tell (missing, failing, no matrix)."""
    try:       # (gpus/nvidia_smi.py's topo_argv: gpus/ sits above fabric/)
        result = await host.run([*nvidia_smi, "topo", "-m"], timeout=timeout, read_only=True)
    except HostError:
        return None
    return (parse_links(result.stdout) or None) if result.ok else None
