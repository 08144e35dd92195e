"""The bring-up plan as plain text: what ``pdtui check CONFIG`` prints.

It restates the validated config the way the engine will act on it (defaults
filled in, units normalized, the order derived from ``after``) so a user can
see what ``pdtui up`` would do without touching any host.
"""

from __future__ import annotations

import shlex

from pdtui.config import COMMANDS, Deployment, HostConfig, ServiceConfig
from pdtui.nvidia_smi import gpu_ranges
from pdtui.text import inert


def render_plan(dep: Deployment) -> str:
    """The deployment, its hosts, the bring-up order and every service, as lines of text."""
    lines = [f"deployment {dep.name}  ({inert(dep.source)})"]
    if dep.strict:
        lines.append("strict mode")
    lines += ["", "hosts"]
    width = max(len(name) for name in dep.hosts)
    for host in dep.hosts.values():
        lines += _host_lines(host, width)
    lines += ["", "bring-up order"]
    lines += [f"  {number}. {_level_actions(dep, level)}" for number, level in enumerate(dep.levels(), 1)]
    lines += ["", "services"]
    for service in dep.services.values():
        lines += _service_lines(service)
    return "\n".join(lines)


def _host_lines(host: HostConfig, width: int) -> list[str]:
    where = "local (this machine, no SSH)" if host.local else f"{host.user + '@' if host.user else ''}{host.address}"
    details = [where]
    if host.port is not None:
        details.append(f"port {host.port}")
    if host.sudo:
        details.append("sudo")
    if host.known_hosts:
        details.append(f"known_hosts {inert(host.known_hosts)}")
    lines = [f"  {host.name:<{width}}  " + ", ".join(details)]
    lines += [
        f"    {name} runs as: {inert(shlex.join(argv))}"
        for name in COMMANDS
        if (argv := host.commands[name]) != (name,)
    ]
    return lines


def _level_actions(dep: Deployment, level: list[str]) -> str:
    """Backends are started; a router is enabled (it must survive a reboot) and then probed."""
    started = [name for name in level if not dep.services[name].is_router]
    routers = [name for name in level if dep.services[name].is_router]
    actions = []
    if started:
        actions.append("start " + ", ".join(started))
    if routers:
        actions.append("enable --now " + ", ".join(routers) + ", then probe")
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
    rows.append(("timeout", format_duration(svc.timeout)))
    if svc.after:
        rows.append(("after", ", ".join(svc.after)))
    if svc.replaces:
        rows.append(("replaces", ", ".join(svc.replaces) + " (stopped and disabled first)"))
    return [f"  {svc.name}  {svc.unit} @ {svc.host}"] + [f"    {label:<12}{value}" for label, value in rows]


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


def format_duration(seconds: float) -> str:
    """Seconds as the config would write them: ``6m``, ``1h30m``, ``90s`` is ``1m30s``."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if value]
    return "".join(parts) or "0s"


