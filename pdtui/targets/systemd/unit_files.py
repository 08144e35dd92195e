"""systemd unit files generated from the config: the launch a hand-typed unit gets wrong.

Each service with a ``launch:`` block becomes one ``<unit>.service``: its GPUs
as ``CUDA_VISIBLE_DEVICES``, its NUMA node bound (systemd's own ``NUMAPolicy=``
from systemd 248, ``numactl`` before), its serving engine's PD flags, and for a router the
URL of every backend it comes after, on whichever host that backend runs.
Pure: the text of a unit depends on the config alone (and the host's systemd
version, when known).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtui.config import Deployment, ServiceConfig
from pdtui.servers import serving_for
from pdtui.targets.generated import comment_text, one_line, one_line_each
from pdtui.targets.systemd.settings import hosts_of, unit_service

# systemd 248 added CPUAffinity=numa (NUMAPolicy= and NUMAMask= came in 243): before it, numactl binds.
SYSTEMD_NUMA = 248
START_LIMIT_INTERVAL, START_LIMIT_BURST, RESTART_SEC = 600, 3, 10


@dataclass(frozen=True)
class UnitFile:
    service: str
    host: str
    name: str           # the unit's name, e.g. sglang-dsv4-prefill.service
    text: str
    secrets: tuple[tuple[str, str], ...] = ()   # its secret env variables: in secret_path, never in the unit
    secret_path: str = ""                       # the EnvironmentFile= that holds them (0600, root's), if any

    @property
    def secret_text(self) -> str:
        """The content of its EnvironmentFile= (empty without secrets)."""
        return env_file_text(dict(self.secrets))


def secret_path(deployment: Deployment, svc: ServiceConfig) -> str:
    """Where a unit's secrets live on its host: ``SECRET_DIR/UNIT.env`` (the host's ``secret_dir``)."""
    unit = unit_service(svc).unit
    assert unit is not None
    return f"{hosts_of(deployment)[svc.host].secret_dir}/{unit}.env"


def env_file_text(secrets: dict[str, str]) -> str:
    """An EnvironmentFile= as systemd reads one: ``KEY="VALUE"`` a line, and in double quotes a backslash escapes
    exactly ``$``, a backquote, ``"`` and itself (the values are one line each: refused otherwise)."""
    return "".join(f'{key}="{_env_file_escaped(value)}"\n' for key, value in secrets.items())


def _env_file_escaped(value: str) -> str:
    return "".join("\\" + c if c in '\\"$`' else c for c in value)


def render_units(deployment: Deployment, *, systemd_versions: dict[str, int] | None = None) -> list[UnitFile]:
    """The unit of every service that has a ``launch:`` block, in config order.

    ``systemd_versions``: each host's systemd version where known; a host not
    named is taken to be recent (systemd's own NUMA binding).
    """
    versions = systemd_versions or {}
    ports = _metrics_ports(deployment)
    return [UnitFile(name, svc.host, unit, render_unit(deployment, svc, versions.get(svc.host), ports.get(name)),
                     tuple((key, one_line(name, f"launch.env {key}", value)) for key, value in svc.launch.secrets.items()),
                     secret_path(deployment, svc) if svc.launch.secrets else "")
            for name, svc in deployment.services.items()
            if svc.launch is not None and (unit := unit_service(svc).unit) is not None]


def _metrics_ports(deployment: Deployment) -> dict[str, int]:
    """Each router's metrics port, as its serving engine chooses them for the whole deployment (once: a fleet's
    hundred routers each asking for all of them cost 0.2 s)."""
    engines = {serving.name: serving for svc in deployment.services.values() if svc.is_router
               for serving in (serving_for(svc),)}
    return {name: port for serving in engines.values() for name, port in serving.metrics_ports(deployment).items()}


def render_unit(deployment: Deployment, svc: ServiceConfig, systemd: int | None = None,
                prometheus_port: int | None = None) -> str:
    assert svc.launch is not None
    launch = svc.launch
    serving = serving_for(svc)
    argv = one_line_each(svc.name, "a word of the command line", serving.command_line(deployment, svc, prometheus_port))
    numactl = svc.numa is not None and systemd is not None and systemd < SYSTEMD_NUMA
    if numactl:
        argv = ["numactl", f"--cpunodebind={svc.numa}", f"--membind={svc.numa}", *argv]
    service_lines = ["Type=simple"]
    env = (({"CUDA_VISIBLE_DEVICES": ",".join(map(str, svc.gpus))} if svc.gpus else {})
           | dict(serving.environment(deployment, svc)) | dict(launch.env))
    secrets = launch.secrets     # in a file only root reads: Environment= is shown to every user (systemctl show)
    service_lines += [f"Environment={_quote_env(key, one_line(svc.name, f'launch.env {key}', value))}"
                      for key, value in env.items() if key not in secrets]
    if secrets:
        # the rest of the line is the path, as it is (no quotes), but for systemd's specifiers
        service_lines.append(f"EnvironmentFile={secret_path(deployment, svc).replace('%', '%%')}")
    if svc.numa is not None and not numactl:
        service_lines += ["NUMAPolicy=bind", f"NUMAMask={svc.numa}", "CPUAffinity=numa"]
    service_lines += [
        f"ExecStart={_exec_line(argv)}",
        # A rank of a server over several nodes is never restarted alone: it cannot rejoin the others.
        *(["Restart=on-failure", f"RestartSec={RESTART_SEC}"] if svc.nnodes == 1 else ["Restart=no"]),
        f"TimeoutStartSec={svc.timeout:g}",
        *(["LimitMEMLOCK=infinity"] if not svc.is_router else []),   # RDMA transfer engines pin memory
        # SIGTERM to the server's main process alone: it drains, then stops its own processes. systemd's default
        # sends SIGTERM to every process of the unit: SGLang 0.5.23's scheduler dies under it, and its main
        # process then kills its whole tree, itself too (the unit ends failed, result 'signal').
        *(["KillMode=mixed"] if not svc.is_router else []),
    ]
    what = f"PD router ({launch.package})" if svc.is_router else f"{serving.title} {svc.role} server"
    header = [
        f"# Generated by pdtui from {comment_text(deployment.source)} (deployment {comment_text(deployment.name)}, "
        f"service {svc.name}).",
        "# Compare with the installed unit: pdtui units CONFIG --diff",
        *_numa_comment(svc, systemd, numactl),
    ]
    return "\n".join([
        *header,
        "[Unit]",
        f"Description={deployment.name} {svc.name}: {what}".replace("%", "%%"),   # % starts a specifier
        "After=network-online.target",
        "Wants=network-online.target",
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL}",
        f"StartLimitBurst={START_LIMIT_BURST}",
        "",
        "[Service]",
        *service_lines,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def _numa_comment(svc: ServiceConfig, systemd: int | None, numactl: bool) -> list[str]:
    if svc.numa is None:
        return []
    if numactl:
        return [f"# NUMA {svc.numa}: numactl, as this host's systemd {systemd} predates CPUAffinity=numa "
                f"(systemd {SYSTEMD_NUMA})."]
    known = f"this host's systemd {systemd}" if systemd is not None else f"systemd {SYSTEMD_NUMA} or later"
    return [f"# NUMA {svc.numa}: systemd's own NUMAPolicy=bind, NUMAMask= and CPUAffinity=numa ({known})."]


def _exec_line(argv: list[str]) -> str:
    """An ExecStart= value: words quoted as systemd reads them (it takes shell-like quotes, and ``%``
    and ``$`` as its own specifiers, so those are doubled)."""
    return " ".join(_systemd_word(word) for word in argv)


def _systemd_word(word: str) -> str:
    word = word.replace("%", "%%").replace("$", "$$")
    return word if word and all(c not in word for c in " \t\"'\\;") else _double_quoted(word)


def _double_quoted(word: str) -> str:
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _quote_env(key: str, value: str) -> str:
    assignment = f"{key}={value}".replace("%", "%%")
    return assignment if all(c not in assignment for c in " \t\"'\\") else _double_quoted(assignment)
