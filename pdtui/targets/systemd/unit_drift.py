"""Drift: what an installed unit really runs, against what the config says.

The hand-typed unit is where a deployment drifts from what its engineer
believes (the config says decode on GPUs 4-7, the unit's CUDA_VISIBLE_DEVICES
says 0-3). The installed files (``systemctl cat``: the unit file and its
drop-ins) are read as systemd reads them, and GPUs, NUMA binding, port,
disaggregation mode and a router's backend URLs compared with the config. The
flags a command line says them by are its serving engine's
(:class:`pdtui.servers.CommandFlags`). A mismatch is an error for that service
before anything starts; a unit that does not say is a note.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from pdtui.config import Deployment, ServiceConfig
from pdtui.engine.checks.workers import url_address
from pdtui.gpus.nvidia_smi import gpu_ranges
from pdtui.servers import CommandFlags, ServingEngine, serving_for
from pdtui.support.argv import flag_value, flag_values
from pdtui.targets.systemd.settings import hosts_of, unit_service

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


@dataclass
class InstalledUnit:
    """The settings of an installed unit that pdtui compares, after every drop-in, and what its command line says."""

    environment: dict[str, str] = field(default_factory=dict)
    exec_start: list[str] = field(default_factory=list)
    numa_policy: str | None = None
    numa_mask: str | None = None

    def flag(self, name: str) -> str | None:
        """The value of ``--name VALUE`` or ``--name=VALUE`` on its command line, the last one given."""
        return self._flags.get(name) if name.startswith("--") else flag_value(self.exec_start, name)

    @cached_property
    def _flags(self) -> dict[str, str]:
        """Every ``--`` flag's value, read once (the drift check asks for several; read only once parsed)."""
        return flag_values(self.exec_start)

    def gpus(self, flags: CommandFlags) -> tuple[list[int] | None, str]:
        """The GPUs it runs on, and how it says so (``flags``: its serving engine's)."""
        return _gpus_of(self, flags)

    def numa(self, flags: CommandFlags) -> tuple[str | None, str]:
        """The NUMA node it is bound to, and how it says so (``flags``: its serving engine's)."""
        return _numa_of(self, flags)


@dataclass(frozen=True)
class Drift:
    service: str
    level: str          # "error" (it differs) or "note" (the unit does not say)
    text: str


def parse_installed(files: Sequence[tuple[str, str]]) -> InstalledUnit:
    """The unit as systemd merges its files: later settings win, ``Environment=`` adds up, an empty
    ``ExecStart=`` resets the list."""
    unit = InstalledUnit()
    for _path, text in files:
        section = ""
        for raw in _logical_lines(text):
            line = raw.strip()
            if line[:1] == "[" and line[-1:] == "]":
                section = line[1:-1]
                continue
            if section != "Service":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                continue
            key, value = key.strip(), value.strip()
            if key == "Environment":
                unit.environment.update(_assignments(value))
            elif key == "ExecStart":
                unit.exec_start = _words(value.lstrip("-@+!:")) if value else []
            elif key == "NUMAPolicy":
                unit.numa_policy = value or None
            elif key == "NUMAMask":
                unit.numa_mask = value or None
    return unit


def _logical_lines(text: str) -> list[str]:
    """Lines with systemd's backslash continuations joined; comments dropped."""
    if "\\" not in text:       # no continuation (most units): each line is one
        return [line for line in text.splitlines() if not line.lstrip().startswith(("#", ";"))]
    lines, pending = [], ""
    for line in text.splitlines():
        if not pending and line.lstrip().startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return lines + ([pending] if pending else [])


def _assignments(value: str) -> dict[str, str]:
    found = {}
    for word in _split(value):
        key, sep, val = word.partition("=")
        if sep:
            found[key] = val
    return found


def _split(text: str) -> list[str]:
    """Words as a shell splits them; text with no quote, backslash or whitespace but spaces needs no
    shell lexer (shlex takes ~0.3 ms per ExecStart line: the preflight reads every unit of a fleet)."""
    text = text.replace("$$", "$").replace("%%", "%")
    if text.isascii() and text.isprintable() and "'" not in text and '"' not in text and "\\" not in text:
        return text.split()
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _words(exec_start: str) -> list[str]:
    """ExecStart's words, and the words inside a ``sh -c "..."``/``bash -c`` script too."""
    outer = _split(exec_start)
    if not any(" " in word for word in outer):     # no quoted script (a word with a space is one)
        return outer
    words = []
    for word in outer:
        words.extend(_split(word) if " " in word else [word])
    return words


def _gpus_of(unit: InstalledUnit, flags: CommandFlags) -> tuple[list[int] | None, str]:
    """The GPUs a unit runs on, and how it says so."""
    words = unit.exec_start
    visible = unit.environment.get("CUDA_VISIBLE_DEVICES")
    for word in words:
        if word.startswith("CUDA_VISIBLE_DEVICES="):      # `env CUDA_VISIBLE_DEVICES=... python ...`
            visible = word.partition("=")[2]
    if visible is not None:
        parts = [p.strip() for p in visible.split(",") if p.strip()]
        return ([int(p) for p in parts] if all(p.isdigit() for p in parts) else None), "CUDA_VISIBLE_DEVICES"
    base = unit.flag(flags.base_gpu)
    tp = next((value for name in flags.tp if (value := unit.flag(name)) is not None), None)
    if base is not None and base.isdigit() and (tp is None or tp.isdigit()):
        return list(range(int(base), int(base) + int(tp or 1))), f"{flags.base_gpu} and {flags.tp[0]}"
    return None, ""


def _numa_of(unit: InstalledUnit, flags: CommandFlags) -> tuple[str | None, str]:
    words = unit.exec_start
    if any(word == "numactl" or word.endswith("/numactl") for word in words):
        for name in ("--cpunodebind", "-N", "--membind", "-m"):
            if (node := flag_value(words, name)) is not None:
                return node, "numactl"
    if unit.numa_policy == "bind" and unit.numa_mask is not None:
        return unit.numa_mask, "NUMAPolicy=bind NUMAMask="
    if (node := unit.flag(flags.numa)) is not None:
        return node, flags.numa
    return None, ""


def service_drift(deployment: Deployment, svc: ServiceConfig, unit: InstalledUnit) -> list[Drift]:
    """What the installed unit of ``svc`` runs that the config does not say, and what it does not say."""
    if not unit.exec_start:
        return [Drift(svc.name, "note", f"{svc.name}: its unit {unit_service(svc).unit} has no ExecStart pdtui can read")]
    serving = serving_for(svc)
    if svc.is_router:
        return _router_drift(deployment, svc, unit, serving.command_flags)
    if svc.role not in ("prefill", "decode"):
        return []
    return [*_gpu_drift(svc, unit, serving.command_flags), *_numa_drift(svc, unit, serving.command_flags),
            *_server_flags_drift(svc, unit, serving), *_rank_drift(deployment, svc, unit, serving.command_flags)]


def _gpu_drift(svc: ServiceConfig, unit: InstalledUnit, flags: CommandFlags) -> list[Drift]:
    gpus, how = _gpus_of(unit, flags)
    if not svc.gpus:
        return []
    if gpus is None:
        return [Drift(svc.name, "note", f"{svc.name}: its unit does not say which GPUs it runs on "
                                        f"(no CUDA_VISIBLE_DEVICES, no {flags.base_gpu}); the config says {gpu_ranges(svc.gpus)}")]
    if sorted(gpus) != sorted(svc.gpus):
        return [Drift(svc.name, "error", f"{svc.name}: its unit runs on GPUs {','.join(map(str, gpus))} ({how}), "
                                         f"the config says {gpu_ranges(svc.gpus)}")]
    return []


def _numa_drift(svc: ServiceConfig, unit: InstalledUnit, flags: CommandFlags) -> list[Drift]:
    node, how = _numa_of(unit, flags)
    if svc.numa is None:
        return []
    if node is None:
        return [Drift(svc.name, "note", f"{svc.name}: its unit binds no NUMA node; the config says NUMA {svc.numa}")]
    if node != str(svc.numa):
        return [Drift(svc.name, "error", f"{svc.name}: its unit binds NUMA node {node} ({how}), the config says {svc.numa}")]
    return []


def _server_flags_drift(svc: ServiceConfig, unit: InstalledUnit, serving: ServingEngine) -> list[Drift]:
    found = []
    words, flags = unit.exec_start, serving.command_flags
    port = unit.flag(flags.port)
    if svc.port is not None and port is None:
        found.append(Drift(svc.name, "note", f"{svc.name}: its unit gives no {flags.port} ({serving.title}'s default is "
                                             f"{flags.default_port}); the config says {svc.port}"))
    elif svc.port is not None and port != str(svc.port):
        found.append(Drift(svc.name, "error", f"{svc.name}: its unit listens on port {port} ({flags.port}), "
                                              f"the config says {svc.port}"))
    roles = serving.pd_roles(words)
    if roles is None and not serving.runs_server(words):
        found.append(Drift(svc.name, "note", f"{svc.name}: its unit does not say its disaggregation mode (it runs "
                                             f"{words[0]}, not {flags.server}); the config says {svc.role}"))
    elif roles is None or svc.role not in roles:
        said = f"runs as {' or '.join(sorted(roles))} ({flags.mode})" if roles else f"runs without {flags.mode} (not PD)"
        found.append(Drift(svc.name, "error", f"{svc.name}: its unit {said}, the config says {svc.role}"))
    if svc.role == "prefill" and svc.bootstrap_port is not None:
        boot = unit.flag(flags.bootstrap_port) or str(flags.default_bootstrap_port)
        if boot != str(svc.bootstrap_port):
            found.append(Drift(svc.name, "error", f"{svc.name}: its unit's bootstrap server is on port {boot}, "
                                                  f"the config says {svc.bootstrap_port}"))
    return found


def _rank_drift(deployment: Deployment, svc: ServiceConfig, unit: InstalledUnit, flags: CommandFlags) -> list[Drift]:
    """A unit that is another rank, of another number of nodes, or meets its peers elsewhere than the config says:
    its server would wait in distributed init for a rank that never comes, or two ranks would both be one."""
    nnodes, rank = unit.flag(flags.nnodes), unit.flag(flags.node_rank) or "0"
    if (nnodes or "1", rank) != (str(svc.nnodes), str(svc.rank)):
        runs = (f"runs as rank {rank} of {nnodes} nodes ({flags.node_rank}, {flags.nnodes})" if nnodes is not None
                else f"runs a server of one node (no {flags.nnodes})")
        config = f"rank {svc.rank} of {svc.nnodes} nodes" if svc.nnodes > 1 else "a server of one node"
        return [Drift(svc.name, "error", f"{svc.name}: its unit {runs}, the config says {config}")]
    meets = unit.flag(flags.dist_init_addr)
    if svc.nnodes > 1 and meets is not None and meets != deployment.dist_addr(svc):
        return [Drift(svc.name, "error", f"{svc.name}: its unit meets its other ranks at {meets} ({flags.dist_init_addr}), "
                                         f"the config says {deployment.dist_addr(svc)}")]
    return []


def _router_drift(deployment: Deployment, svc: ServiceConfig, unit: InstalledUnit, flags: CommandFlags) -> list[Drift]:
    words = unit.exec_start
    found = []
    port = unit.flag(flags.port)
    if port is not None and port != str(svc.port):
        found.append(Drift(svc.name, "error", f"{svc.name}: its unit listens on port {port} ({flags.port}), "
                                              f"the config says {svc.port}"))
    listed = {role: [words[i + 1] for i, w in enumerate(words) if w == flag and i + 1 < len(words)]
              for role, flag in flags.backends.items()}
    if not any(listed.values()):
        return found + [Drift(svc.name, "note", f"{svc.name}: its unit names no {' or '.join(flags.backends.values())} "
                                                f"backend (it runs {words[0]}); the config says {', '.join(svc.after)}")]
    addresses = {role: {a for url in urls if (a := url_address(url)) is not None} for role, urls in listed.items()}
    for name in svc.after:
        backend = deployment.services[name]
        if backend.role not in listed or backend.port is None:
            continue
        if not _sends_to(deployment, svc, backend, addresses[backend.role]):
            urls = ", ".join(listed[backend.role]) or "none"
            found.append(Drift(svc.name, "note", f"{svc.name}: its unit does not send to {name} "
                                                 f"(its {flags.backends[backend.role]} URLs: {urls}; {name} is on "
                                                 f"{backend.host}:{backend.port}): the router gets it through its "
                                                 f"worker API once {name} is ready; its unit lacks it until rewritten"))
    return found


def _sends_to(deployment: Deployment, router: ServiceConfig, backend: ServiceConfig,
              addresses: set[tuple[str, int | None]]) -> bool:
    """Whether one of a router's backend addresses is ``backend``: its port, under a name its host goes by."""
    host = hosts_of(deployment)[backend.host]
    names = {n for n in (host.address, backend.host) if n}
    if backend.host == router.host or host.local:
        names |= LOOPBACK
    return any((name, backend.port) in addresses for name in names)
