"""CPU used by the processes of a pipeline stage, from /proc (Linux): which stage is the busy one."""

from __future__ import annotations

import os
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _snapshot() -> dict[int, tuple[int, float, str]]:
    """pid -> (ppid, cpu seconds, cmdline) for every process we may read."""
    procs = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        procs[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, cmdline)
    return procs


def _descendants(procs: dict, roots: set[int]) -> set[int]:
    found = set(roots) & set(procs)
    grew = True
    while grew:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return found


def stage_of(cmdline: str) -> str:
    for marker, stage in (("pdtui.sim.worker", "sim worker (log writer)"), ("pdtui.sim.supervisor", "sim supervisor (journal writer)"),
                          ("pdtui.sim.journalctl", "sim journalctl -f"), ("sglang", "router"), ("sshd", "sshd")):
        if marker in cmdline:
            return stage
    return "other"


PDTUI_STAGE = "pdtui (ssh client + engine + TUI)"


class StageCpu:
    """CPU seconds per stage between :meth:`start` and :meth:`stop`, as cores busy."""

    def __init__(self, sandbox_root: Path, server_pids: list[int]) -> None:
        self.root = str(sandbox_root)
        self.server_pids = set(server_pids)

    def _measure(self) -> dict[str, float]:
        procs = _snapshot()
        supervisors = {pid for pid, (_, _, cmd) in procs.items() if "pdtui.sim.supervisor" in cmd and self.root in cmd}
        ours = _descendants(procs, supervisors | self.server_pids)
        cpu: dict[str, float] = {}
        for pid in ours:
            stage = stage_of(procs[pid][2])
            cpu[stage] = cpu.get(stage, 0.0) + procs[pid][1]
        times = os.times()
        cpu[PDTUI_STAGE] = times.user + times.system
        return cpu

    def start(self) -> None:
        self._t0, self._cpu0 = time.monotonic(), self._measure()

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self._t0
        cpu1 = self._measure()
        return {stage: round((cpu1[stage] - self._cpu0.get(stage, 0.0)) / wall, 3) for stage in cpu1}
