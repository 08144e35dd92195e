"""A serving engine as its package declares it: the one :class:`~pdtui.servers.ServingEngine` every engine is.

An engine's package holds what is its own: its phase and signature tables, and the modules that launch its servers
and router (``launch``), read their figures (``metrics``), judge a pair and a host (``pairing``), read a running
server's account of itself (``server_info``) and send the request a pair is proven by (``pd_request``). Its
``engine`` module fills in a :class:`DeclaredEngine` with them and the few facts that are data (which role counts
the KV transfers, whether its router puts a worker back, its own readiness checks). What every engine does alike
with them (a role's signatures with the user's patterns, a phase's timing, the figures of a router or a server, a
planned command) is written here once, so a third engine is its modules and one declaration.

Each of those modules is taken as it is: a module satisfies a Protocol by its functions and constants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pdtui.servers import (
    ArgumentsProbe,
    CommandFlags,
    Mismatch,
    PairAnswers,
    PairSend,
    ServerCommand,
    TransferPath,
    phase_timing,
)
from pdtui.servers.phase_table import PhaseTable, PhaseTracker
from pdtui.servers.ports import metrics_ports
from pdtui.servers.prometheus import MetricsSample
from pdtui.servers.signature_table import SignatureTable
from pdtui.support.argv import flag_value

if TYPE_CHECKING:
    from pdtui.config import Deployment, ServiceConfig
    from pdtui.hosts.http import HttpProber
    from pdtui.servers import ServingEngine
    from pdtui.vocabulary.checks import ReadinessCheck
    from pdtui.vocabulary.figures import Figures, KvTotals, TransferQueues
    from pdtui.vocabulary.signatures import Signature


class Launch(Protocol):
    """An engine's ``launch`` module: the command lines a ``launch:`` block runs, and how one is read back."""

    @property
    def FLAGS(self) -> CommandFlags: ...

    def command_line(self, deployment: Deployment, svc: ServiceConfig, prometheus_port: int | None = None,
                     backend_urls: Mapping[str, str] | None = None) -> list[str]: ...

    def environment(self, deployment: Deployment, svc: ServiceConfig) -> Mapping[str, str]: ...

    def roles_of(self, words: Sequence[str]) -> frozenset[str] | None: ...

    def runs_server(self, words: Sequence[str]) -> bool: ...


class Metrics(Protocol):
    """An engine's ``metrics`` module: its servers' and router's ``/metrics``, its batch lines, its KV series."""

    @property
    def METRICS_HINT(self) -> str: ...

    @property
    def TRANSFER_FAILED(self) -> str: ...

    def parse_metrics(self, text: str, at: float) -> MetricsSample: ...

    def figures_between(self, previous: MetricsSample | None, current: MetricsSample, role: str = "decode") -> Figures:
        ...

    def router_figures_between(self, previous: MetricsSample | None, current: MetricsSample) -> Figures: ...

    def batch_line(self, message: str) -> bool: ...

    def batch_figures(self, message: str) -> Figures | None: ...

    def kv_totals(self, text: str) -> KvTotals: ...

    def transfer_queues(self, text: str) -> TransferQueues | None: ...


class Pairing(Protocol):
    """An engine's ``pairing`` module: what a prefill and a decode must share, and the servers of one host must not."""

    def pair_mismatches(self, prefill: tuple[str, ServerCommand], decode: tuple[str, ServerCommand]) -> list[Mismatch]:
        ...

    def host_mismatches(self, servers: Sequence[tuple[ServiceConfig, ServerCommand]]) -> list[Mismatch]: ...

    def transfer_path(self, command: ServerCommand) -> TransferPath | None: ...

    def running_mismatches(self, prefill: tuple[str, Mapping[str, Any]],
                           decode: tuple[str, Mapping[str, Any]]) -> list[Mismatch]: ...


class ServerInfo(Protocol):
    """An engine's ``server_info`` module: a running server's own account of how it runs."""

    async def read_server_info(self, prober: HttpProber, port: int, address: str = ...) -> Mapping[str, Any] | None:
        ...


class PdRequest(Protocol):
    """An engine's ``pd_request`` module: the request a prefill and a decode are proven by."""

    async def pair(self, send: PairSend, prompt: str, *, max_new_tokens: int,
                   bootstrap: tuple[str, int]) -> PairAnswers: ...


@dataclass(frozen=True, slots=True, eq=False)
class DeclaredEngine:
    """A serving engine: its name and title, its tables and modules, and what is data of it.

    ``kv_series_role``: the role whose servers count each KV transfer (SGLang's prefill sends, vLLM's decode pulls);
    ``router_puts_back``: its router's worker API puts a worker taken out back (a drain's end);
    ``readiness_checks``: its own checks of a backend, after the generic ones;
    ``quiet_health``: a path its servers answer as they answer ``/health`` but without generating (SGLang's
    ``/ready``: its ``/health`` runs a one-token generation and answers a second later at the soonest), asked in its
    place while a server serves it.
    """

    name: str
    title: str
    phases: PhaseTable
    signatures: SignatureTable
    launch: Launch
    metrics: Metrics
    pairing: Pairing
    server_info_reader: ServerInfo
    pd_request: PdRequest
    arguments_probe: ArgumentsProbe
    kv_series_role: str
    router_puts_back: bool
    readiness_checks: tuple[ReadinessCheck, ...] = ()
    quiet_health: str | None = None

    # Its log lines and start-up phases.

    @property
    def phase_labels(self) -> Mapping[str, str]:
        return self.phases.labels

    @property
    def hang_prone(self) -> Mapping[str, str]:
        return self.phases.hang_prone

    def signatures_for(self, role: str, extra: Sequence[str] = ()) -> tuple[Signature, ...]:
        return self.signatures.signatures_for(role, tuple(extra))

    def request_line(self, message: str) -> bool:
        return self.signatures.request_line(message)

    def peer_lost(self, reason: str) -> bool:
        return self.signatures.lost_a_peer(reason)

    def backend_checks(self) -> tuple[ReadinessCheck, ...]:
        return self.readiness_checks

    def page_size(self, command: ServerCommand | None, info: Mapping[str, Any] | None) -> int | None:
        told = (info or {}).get("page_size")
        if isinstance(told, int) and not isinstance(told, bool) and told > 0:
            return told
        given = flag_value(command.words, self.launch.FLAGS.page) if command is not None else None
        return int(given) if given is not None and given.isdigit() and int(given) > 0 else None

    def health_path(self, path: str | None) -> str | None:
        return self.quiet_health if path == "/health" and self.quiet_health else path

    def phase_tracker(self) -> PhaseTracker:
        return self.phases.tracker()

    def follower_ready(self, message: str) -> bool:
        return self.phases.follower_ready(message)

    def slow_from(self, last: float) -> float:
        return phase_timing.slow_from(last)

    def slow(self, seconds: float, last: float | None) -> bool:
        return phase_timing.slow(seconds, last)

    def phase_durations(self, starts: Sequence[tuple[str, float]]) -> dict[str, float]:
        return phase_timing.durations(starts)

    # Its live figures.

    @property
    def metrics_hint(self) -> str:
        return self.metrics.METRICS_HINT

    @property
    def failed_transfers_series(self) -> str:
        return f"{self.metrics.TRANSFER_FAILED}_total"

    def batch_line(self, message: str) -> bool:
        return self.metrics.batch_line(message)

    def batch_figures(self, message: str) -> Figures | None:
        return self.metrics.batch_figures(message)

    def figures(self, text: str, at: float, previous: Any, role: str) -> tuple[MetricsSample, Figures]:
        sample = self.metrics.parse_metrics(text, at)
        if role == "router":
            return sample, self.metrics.router_figures_between(previous, sample)
        return sample, self.metrics.figures_between(previous, sample, role)

    def metrics_ports(self, deployment: Deployment) -> Mapping[str, int]:
        return metrics_ports(deployment, self.name)

    def kv_totals(self, text: str) -> KvTotals:
        return self.metrics.kv_totals(text)

    def transfer_queues(self, text: str) -> TransferQueues | None:
        return self.metrics.transfer_queues(text)

    # Its command lines.

    @property
    def command_flags(self) -> CommandFlags:
        return self.launch.FLAGS

    def command_line(self, deployment: Deployment, cfg: ServiceConfig, metrics_port: int | None = None,
                     backend_urls: Mapping[str, str] | None = None) -> list[str]:
        return self.launch.command_line(deployment, cfg, metrics_port, backend_urls)

    def environment(self, deployment: Deployment, cfg: ServiceConfig) -> Mapping[str, str]:
        return self.launch.environment(deployment, cfg)

    def planned_command(self, deployment: Deployment, cfg: ServiceConfig) -> ServerCommand | None:
        if cfg.launch is None:
            return None
        return ServerCommand(tuple(self.command_line(deployment, cfg)),
                             {**self.environment(deployment, cfg), **cfg.launch.env},
                             f"its launch: block in {deployment.source}")

    def pd_roles(self, words: Sequence[str]) -> frozenset[str] | None:
        return self.launch.roles_of(words)

    def runs_server(self, words: Sequence[str]) -> bool:
        return self.launch.runs_server(words)

    # Its pairs and hosts.

    def pair_mismatches(self, prefill: tuple[str, ServerCommand], decode: tuple[str, ServerCommand]) -> list[Mismatch]:
        return self.pairing.pair_mismatches(prefill, decode)

    def host_mismatches(self, servers: Sequence[tuple[ServiceConfig, ServerCommand]]) -> list[Mismatch]:
        return self.pairing.host_mismatches(servers)

    def transfer_path(self, command: ServerCommand) -> TransferPath | None:
        return self.pairing.transfer_path(command)

    async def server_info(self, prober: HttpProber, port: int, address: str) -> Mapping[str, Any] | None:
        return await self.server_info_reader.read_server_info(prober, port, address)

    def running_mismatches(self, prefill: tuple[str, Mapping[str, Any]],
                           decode: tuple[str, Mapping[str, Any]]) -> list[Mismatch]:
        return self.pairing.running_mismatches(prefill, decode)

    async def pair(self, send: PairSend, prompt: str, *, max_new_tokens: int,
                   bootstrap: tuple[str, int]) -> PairAnswers:
        return await self.pd_request.pair(send, prompt, max_new_tokens=max_new_tokens, bootstrap=bootstrap)


if TYPE_CHECKING:
    _IMPLEMENTS: type[ServingEngine] = DeclaredEngine      # mypy holds every declared engine to the interface
