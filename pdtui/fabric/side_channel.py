"""vLLM's NIXL side channel against the other ports of its host, before anything starts.

A vLLM server with the NIXL connector listens for its peers' handshakes on its
side-channel port (``VLLM_NIXL_SIDE_CHANNEL_PORT``, 5600 by default; a server
with data parallelism takes one more per DP rank above it). Two servers given
one base port are refused by vLLM's own host check (servers/vllm/pairing.py).
What is judged here: a side-channel port that is an HTTP port, a prefill's
bootstrap port or a router's metrics port on the same host, or that falls in
another server's side-channel ports. Whichever binds second fails, and the side
channel does not exit when it does (its listener thread dies and the server
hangs at start), so each is refused before start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pdtui.config import DEFAULT_BOOTSTRAP_PORT, Deployment, ServiceConfig
from pdtui.fabric.ucx import NIXL
from pdtui.servers import Mismatch, ServerCommand, serving_for
from pdtui.servers.ports import SIDE_CHANNEL_ENV, SIDE_CHANNEL_FROM, chosen_ports
from pdtui.support.argv import flag_value

VLLM = "vllm"
DP_FLAGS = ("--data-parallel-size", "-dp")
WHY = "whichever binds it second fails, and vLLM's side channel hangs at start rather than exits on it"


def side_channels(command: ServerCommand) -> range:
    """The side-channel ports a NIXL server takes: its base port, one more per data-parallel rank."""
    given = command.env.get(SIDE_CHANNEL_ENV, "").strip()
    base = int(given) if given.isdigit() else SIDE_CHANNEL_FROM
    dp = next((int(v) for f in DP_FLAGS if (v := flag_value(command.words, f)) is not None and v.isdigit()), 1)
    return range(base, base + max(dp, 1))


def side_channel_mismatches(deployment: Deployment,
                            places: Iterable[Sequence[tuple[ServiceConfig, ServerCommand | None]]]) -> list[Mismatch]:
    """The side channels of each place's vLLM NIXL servers against the ports of every service there and against
    each other's; a place is one machine's services, each with its command line as it will run (None: not known)."""
    found: list[Mismatch] = []
    metrics: Mapping[str, int] | None = None
    for services in places:
        nixl = [(cfg, command) for cfg, command in services if command is not None and _nixl(cfg, command)]
        if nixl:
            metrics = chosen_ports(deployment)[0] if metrics is None else metrics
            found += _host(deployment, nixl, [cfg for cfg, _ in services], metrics)
    return found


def _nixl(cfg: ServiceConfig, command: ServerCommand) -> bool:
    """A vLLM server that moves KV with NIXL (SGLang's NIXL backend has no side channel: its bootstrap server)."""
    path = serving_for(cfg).transfer_path(command) if cfg.engine == VLLM else None
    return path is not None and path.backend == NIXL


def _host(deployment: Deployment, nixl: Sequence[tuple[ServiceConfig, ServerCommand]],
          services: Sequence[ServiceConfig], metrics: Mapping[str, int]) -> list[Mismatch]:
    taken = [(port, what, svc) for svc in services for port, what in _ports(svc, metrics)]
    found: list[Mismatch] = []
    for index, (cfg, command) in enumerate(nixl):
        channels = side_channels(command)
        for port, what, svc in taken:
            if port in channels:
                whose = "its own" if svc.name == cfg.name else f"{svc.name}'s"
                found.append(Mismatch("error", "host", tuple(dict.fromkeys((cfg.name, svc.name))),
                                      "NIXL side channel", (str(port), str(port)),
                                      (command.source, f"{svc.name} in {deployment.source}"),
                                      f"{cfg.name}'s NIXL side-channel port {port} ({SIDE_CHANNEL_ENV}) is {whose} "
                                      f"{what} on {cfg.host}: {WHY}"))
        for other, other_command in nixl[index + 1:]:
            theirs = side_channels(other_command)
            first = max(channels.start, theirs.start)
            # (one base port for both is vLLM's own host check's refusal)
            if first < min(channels.stop, theirs.stop) and channels.start != theirs.start:
                found.append(Mismatch("error", "host", (cfg.name, other.name), "NIXL side channel",
                                      (_span(channels), _span(theirs)), (command.source, other_command.source),
                                      f"{cfg.name}'s NIXL side-channel ports {_span(channels)} and {other.name}'s "
                                      f"{_span(theirs)} share {first} on {cfg.host} (vLLM takes one port per "
                                      f"data-parallel rank from {SIDE_CHANNEL_ENV} up): {WHY}"))
    return found


def _ports(svc: ServiceConfig, metrics: Mapping[str, int]) -> list[tuple[int, str]]:
    """The ports a service of the config binds on its host, and what each is for."""
    ports = [(svc.port, "port" if svc.is_router else "HTTP port")] if svc.port is not None else []
    if svc.role == "prefill" and svc.engine == "sglang" and not svc.follower:
        ports.append((svc.bootstrap_port or DEFAULT_BOOTSTRAP_PORT, "bootstrap port"))
    if (metrics_port := metrics.get(svc.name)) is not None:
        ports.append((metrics_port, "metrics port"))
    return ports


def _span(ports: range) -> str:
    return f"{ports.start}-{ports.stop - 1}" if len(ports) > 1 else str(ports.start)
