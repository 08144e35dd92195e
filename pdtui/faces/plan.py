"""The bring-up plan as plain text: what ``pdtui check CONFIG`` prints.

It restates the validated config the way the engine will act on it (defaults
filled in, units normalized, the order derived from ``after``) so a user can
see what ``pdtui up`` would do without touching any host.
"""

from __future__ import annotations

import shlex

from pdtui.config import Deployment, ServiceConfig
from pdtui.config.fields import format_duration
from pdtui.config.places import Reached
from pdtui.gpus.nvidia_smi import gpu_ranges
from pdtui.support.text import inert
from pdtui.targets.slurm.settings import JOBS, ClusterConfig, JobSpec, clusters_of, job_service
from pdtui.targets.systemd.settings import COMMANDS, HostConfig, hosts_of, unit_service


def render_plan(dep: Deployment) -> str:
    """The deployment, its hosts and clusters, the bring-up order and every service, as lines of text."""
    lines = [f"deployment {dep.name}  ({inert(dep.source)})"]
    if dep.strict:
        lines.append("strict mode")
    hosts, clusters = hosts_of(dep), clusters_of(dep)
    width = max(len(name) for name in (*hosts, *clusters))
    if hosts:
        lines += ["", "hosts"]
        for host in hosts.values():
            lines += _host_lines(host, width)
    if clusters:
        lines += ["", "Slurm clusters"]
        for cluster in clusters.values():
            lines += _cluster_lines(cluster, width)
    lines += ["", "bring-up order"]
    lines += [f"  {number}. {_level_actions(dep, level)}" for number, level in enumerate(dep.levels(), 1)]
    lines += ["", "services"]
    for service in dep.services.values():
        lines += _service_lines(service)
    return "\n".join(lines)


def _where(machine: Reached) -> list[str]:
    where = "local (this machine, no SSH)" if machine.local else f"{machine.user + '@' if machine.user else ''}{machine.address}"
    details = [where]
    if machine.port is not None:
        details.append(f"port {machine.port}")
    if machine.known_hosts:
        details.append(f"known_hosts {inert(machine.known_hosts)}")
    return details


def _host_lines(host: HostConfig, width: int) -> list[str]:
    details = _where(host)
    if host.sudo:
        details.append("sudo")
    lines = [f"  {host.name:<{width}}  " + ", ".join(details)]
    lines += [
        f"    {name} runs as: {inert(shlex.join(argv))}"
        for name in COMMANDS
        if (argv := host.commands[name]) != (name,)
    ]
    return lines


def _cluster_lines(cluster: ClusterConfig, width: int) -> list[str]:
    details = ["login host " + ", ".join(_where(cluster)), f"job output in {inert(cluster.output_dir)}"]
    if cluster.partition:
        details.append(f"partition {cluster.partition}")
    lines = [f"  {cluster.name:<{width}}  " + ", ".join(details)]
    lines += [f"    {name} runs as: {inert(shlex.join(argv))}" for name, argv in cluster.commands.items() if argv != (name,)]
    return lines


def _level_actions(dep: Deployment, level: list[str]) -> str:
    """Backends are started (a job submitted); a router is started, then enabled (it must survive a reboot), or
    submitted once its backends' nodes are known, and then probed."""
    actions = []
    for routers, unit_verb in ((False, "start"), (True, "start and enable")):
        names = [name for name in level if dep.services[name].is_router is routers]
        jobs = [name for name in names if dep.services[name].placement is JOBS]
        for verb, group in ((unit_verb, [name for name in names if name not in jobs]), ("submit", jobs)):
            if group:
                actions.append(f"{verb} {', '.join(group)}" + (", then probe" if routers else ""))
    return "; ".join(actions)


def _service_lines(svc: ServiceConfig) -> list[str]:
    rows: list[tuple[str, str]] = [("role", svc.role)]
    if svc.gpus:
        rows.append(("GPUs", gpu_ranges(svc.gpus)))
    if svc.numa is not None:
        rows.append(("NUMA", str(svc.numa)))
    if svc.port is not None:
        rows.append(("port", str(svc.port)))
    rows.append(("ready when", _readiness(svc)))
    if svc.fail:
        rows.append(("fails on", ", ".join(f"/{inert(regex)}/" for regex in svc.fail) + " (besides the defaults)"))
    job, unit = job_service(svc), unit_service(svc)
    if job.job is not None:
        rows.append(("job", _job(job.job)))
    rows.append(("timeout", format_duration(svc.timeout) + (" from the job's start" if job.is_job else "")))
    if job.is_job:
        rows.append(("queue", f"may wait {format_duration(job.queue_timeout)} for its place"))
    if svc.after:
        rows.append(("after", ", ".join(svc.after)))
    if unit.replaces:
        rows.append(("replaces", ", ".join(unit.replaces) + " (stopped and disabled first)"))
    what = f"job {job.job.name}" if job.job is not None else unit.unit
    return [f"  {svc.name}  {what} @ {svc.host}"] + [f"    {label:<12}{value}" for label, value in rows]


def _job(job: JobSpec) -> str:
    """What the job asks Slurm for, in words."""
    parts = [f"{job.nodes} node{'s' * (job.nodes != 1)}"]
    if job.gpus_per_node:
        parts.append(f"{job.gpus_per_node} {job.gpu_type + ' ' if job.gpu_type else ''}GPUs each")
    parts += [f"{key} {getattr(job, key)}" for key in ("partition", "account", "qos", "constraint") if getattr(job, key)]
    if job.time is not None:
        parts.append(f"time limit {format_duration(job.time)}")
    return ", ".join(parts)


def _readiness(svc: ServiceConfig) -> str:
    checks = []
    if svc.ready.log:
        checks.append(f"log /{inert(svc.ready.log)}/")
    if svc.ready.http:
        checks.append(f"http {inert(svc.ready.http)} answers 200")
    if svc.ready.tcp:
        checks.append(f"tcp :{svc.port} accepts")
    if svc.is_router:
        checks.append("/readiness 200, every backend healthy in /workers, a model in /v1/models, "
                      "one chat completion through the router")
    return ", ".join(checks) or "started (no readiness checks)"



