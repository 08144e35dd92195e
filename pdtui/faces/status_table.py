"""``pdtui status --once``: the deployment as one table, or as one JSON object.

A :class:`StatusBoard` follows the engine's events like any face and keeps, per
service, the last of each: its state and reason, its unit as systemd reported
it (or its job as Slurm did), its checks, its GPUs' memory. The JSON object is the contract documented in
README.md ("status --once --json").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pdtui.config.fields import format_duration
from pdtui.engine.events import (
    Done,
    Event,
    JobStatus,
    PairMatrix,
    PairResult,
    PlanReady,
    ProbeResult,
    RouterBackends,
    ServiceInfo,
    StateChanged,
    UnitStatus,
)
from pdtui.engine.states import ServiceState
from pdtui.faces.outcome import since_ready
from pdtui.faces.pair_matrix import matrix_lines
from pdtui.gpus.inventory import GpuInfo
from pdtui.gpus.nvidia_smi import gpu_ranges
from pdtui.gpus.sampler import GpuSample
from pdtui.support.text import inert, json_inert


@dataclass
class ServiceStatus:
    info: ServiceInfo
    state: ServiceState = ServiceState.PENDING
    reason: str = ""
    line: str | None = None
    unit: UnitStatus | None = None
    job: JobStatus | None = None
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    gpus: dict[int, GpuInfo] = field(default_factory=dict)
    pairs: tuple[PairResult, ...] = ()           # a router's pairs, as last proven
    routed: RouterBackends | None = None         # a router's workers as it last listed them


class StatusBoard:
    """The last word on every service, from the events."""

    def __init__(self) -> None:
        self.deployment = ""
        self.config = ""      # the config file, as named or found
        self.services: dict[str, ServiceStatus] = {}
        self.done: Done | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, PlanReady):
            self.deployment, self.config = event.deployment, event.config
            self.services = {info.name: ServiceStatus(info) for info in event.services}
        elif isinstance(event, StateChanged) and event.service in self.services:
            status = self.services[event.service]
            status.state, status.reason, status.line = event.new, event.reason, event.line
        elif isinstance(event, UnitStatus) and event.service in self.services:
            self.services[event.service].unit = event
        elif isinstance(event, JobStatus) and event.service in self.services:
            self.services[event.service].job = event
        elif isinstance(event, ProbeResult) and event.service in self.services:
            self.services[event.service].checks[event.check] = (event.ok, event.detail)
        elif isinstance(event, PairMatrix) and event.service in self.services:
            self.services[event.service].pairs = event.pairs
        elif isinstance(event, RouterBackends) and event.service in self.services:
            self.services[event.service].routed = event
        elif isinstance(event, GpuSample):
            for status in self.services.values():
                if status.info.host == event.host:
                    status.gpus |= {gpu.index: gpu for gpu in event.gpus if gpu.index in status.info.gpus}
        elif isinstance(event, Done):
            self.done = event

    def as_json(self) -> str:
        done = self.done
        data = {"kind": "status", "deployment": self.deployment, "config": self.config, "ok": bool(done and done.ok),
                "exit_code": done.exit_code if done else 1, "elapsed": done.elapsed if done else None,
                "ready_at": done.ready_at if done else None, "failed_at": done.failed_at if done else None,
                "services": [_service_json(s) for s in self.services.values()]}
        return json_inert(json.dumps(data, ensure_ascii=False))

    def table(self) -> str:
        """The config file it was read from, then one line per service: name, state, unit state and uptime, GPUs,
        then the reason."""
        rows = [("SERVICE", "STATE", "UNIT", "UP", "HOST", "GPUS", "WHY")]
        for s in self.services.values():
            unit, job = s.unit, s.job
            what = f"job {job.job_id} {job.state}" if job else f"{unit.active} ({unit.sub})" if unit else "?"
            rows.append((s.info.name, s.state.value.upper().replace("_", " "), inert(what, 60),
                         format_duration(round(unit.uptime)) if unit and unit.uptime is not None else "-",
                         inert(f"{s.info.host}:{job.node}" if job and job.node else s.info.host, 60),
                         gpu_ranges(job.gpus if job else s.info.gpus) or "-", inert(s.reason, 200)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        lines = [f"config {inert(self.config)}"] if self.config else []
        lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1]
                  for row in rows]
        for s in self.services.values():
            if s.routed is not None:
                lines += ["", *routed_lines(s.info.name, s.routed)]
            if s.pairs:
                lines += [""] + [f"{s.info.name} {line}" if n == 0 else " " * (len(s.info.name) + 1) + line
                                 for n, line in enumerate(matrix_lines(s.pairs))]
        if self.done is not None:
            lines.append(self._footer(self.done))
        return "\n".join(line.rstrip() for line in lines)

    def _footer(self, done: Done) -> str:
        """``dsv4: 2 of 3 ready``, and when a service failed after the deployment was ready, since when."""
        ready = sum(s.state is ServiceState.READY for s in self.services.values())
        footer = f"{self.deployment}: {ready} of {len(self.services)} ready"
        if done.ready_at is not None and done.failed_at is not None:
            footer += f" ({since_ready(done.ready_at, 'failed', done.failed_at)})"
        return footer


def routed_lines(router: str, routed: RouterBackends) -> list[str]:
    """What a router routes to, by service, then what it lacks of the config and what the config does not name."""
    known = [f"{w.service}{'' if w.healthy else ' (unhealthy)'}" for w in routed.workers if w.service is not None]
    lines = [f"{router} routes to: {', '.join(known) if known else 'no configured backend'}"]
    if routed.lacking:
        lines.append(f"{router} lacks: {', '.join(routed.lacking)} (in the config, not among its workers)")
    lines += [f"{router} also routes to {inert(w.url, 200)} ({inert(w.role or 'a worker', 20)}), which the config "
              f"does not name; to drop it: {inert(w.drop, 300)}" for w in routed.workers if w.service is None]
    return lines


def _service_json(s: ServiceStatus) -> dict:
    unit, job = s.unit, s.job
    return {
        "name": s.info.name, "role": s.info.role, "host": s.info.host, "unit": s.info.unit,
        "state": s.state.value, "reason": s.reason, "line": s.line,
        "active": unit.active if unit else None, "sub": unit.sub if unit else None,
        "invocation": (unit.invocation or None) if unit else None, "since": (unit.since or None) if unit else None,
        "uptime": round(unit.uptime, 1) if unit and unit.uptime is not None else None,
        "main_pid": unit.main_pid if unit and unit.main_pid else None,
        "gpus": list(job.gpus if job else s.info.gpus), "numa": s.info.numa, "port": s.info.port,
        "job": {"id": job.job_id, "state": job.state, "reason": job.reason, "node": job.node or None,
                "exit_code": job.exit_code or None} if job else None,
        "checks": {name: {"ok": ok, "detail": detail} for name, (ok, detail) in s.checks.items()},
        "pairs": [{"prefill": p.prefill, "decode": p.decode, "ok": p.ok, "detail": p.detail} for p in s.pairs],
        "workers": [{"url": w.url, "role": w.role, "healthy": w.healthy, "service": w.service}
                    | ({"drop": w.drop} if w.service is None else {}) for w in s.routed.workers] if s.routed else None,
        "lacking": list(s.routed.lacking) if s.routed else None,
        "gpu_memory": [{"index": g.index, "used_mib": g.memory_used_mib, "total_mib": g.memory_total_mib,
                        "utilization": g.utilization} for g in sorted(s.gpus.values(), key=lambda g: g.index)],
    }
