"""vLLM as a :class:`~pdtui.servers.ServingEngine`: its modules behind the one interface the engine uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pdtui.config import Deployment, ServiceConfig
from pdtui.hosts.http import HttpProber
from pdtui.servers import ArgumentsProbe, Mismatch, PairAnswers, PairSend, ServerCommand, TransferPath
from pdtui.servers.ports import metrics_ports
from pdtui.servers.vllm import arguments, launch, metrics, pairing, pd_request, phases, signatures
from pdtui.servers.vllm.server_info import read_server_info
from pdtui.vocabulary.checks import ReadinessCheck
from pdtui.vocabulary.figures import Figures, KvTotals
from pdtui.vocabulary.signatures import Signature


class VLLM:
    name = "vllm"
    title = "vLLM"
    phase_labels: Mapping[str, str] = phases.LABELS
    hang_prone: Mapping[str, str] = phases.HANG_PRONE

    def signatures_for(self, role: str, extra: Sequence[str] = ()) -> tuple[Signature, ...]:
        return signatures.signatures_for(role, tuple(extra))

    def request_line(self, message: str) -> bool:
        return signatures.request_line(message)

    def phase_tracker(self) -> phases.PhaseTracker:
        return phases.PhaseTracker()

    def slow_from(self, last: float) -> float:
        return phases.slow_from(last)

    def batch_line(self, message: str) -> bool:
        return metrics.batch_line(message)

    def batch_figures(self, message: str) -> Figures | None:
        return metrics.batch_figures(message)

    def follower_ready(self, message: str) -> bool:
        return False            # pdtui brings up a vLLM server on one node: it has no ranks >= 1

    def peer_lost(self, reason: str) -> bool:
        return False

    def backend_checks(self) -> tuple[ReadinessCheck, ...]:
        return ()               # no bootstrap server: its decodes reach it over the side channel, per request

    metrics_hint = metrics.METRICS_HINT
    kv_series_role = "decode"       # NIXL's default pull: the decode reads the KV, and counts it
    # vllm-router 0.1.17 in PD mode takes a worker out (DELETE /workers/{url}) but refuses one back (POST /workers:
    # 400 "PD router requires specific add_prefill_server or add_decode_server methods").
    router_puts_back = False
    failed_transfers_series = f"{metrics.TRANSFER_FAILED}_total"

    def figures(self, text: str, at: float, previous: Any, role: str) -> tuple[Any, Figures]:
        sample = metrics.parse_metrics(text, at)
        if role == "router":
            return sample, metrics.router_figures_between(previous, sample)
        return sample, metrics.figures_between(previous, sample, role)

    def metrics_ports(self, deployment: Deployment) -> Mapping[str, int]:
        return metrics_ports(deployment, self.name)

    def kv_totals(self, text: str) -> KvTotals:
        return metrics.kv_totals(text)

    def planned_command(self, deployment: Deployment, cfg: ServiceConfig) -> ServerCommand | None:
        if cfg.launch is None:
            return None
        return ServerCommand(tuple(launch.command_line(deployment, cfg)),
                             {**launch.environment(deployment, cfg), **cfg.launch.env},
                             f"its launch: block in {deployment.source}")

    def pair_mismatches(self, prefill: tuple[str, ServerCommand], decode: tuple[str, ServerCommand]) -> list[Mismatch]:
        return pairing.pair_mismatches(prefill, decode)

    def host_mismatches(self, servers: Sequence[tuple[ServiceConfig, ServerCommand]]) -> list[Mismatch]:
        return pairing.host_mismatches(servers)

    def transfer_path(self, command: ServerCommand) -> TransferPath | None:
        return pairing.transfer_path(command)

    async def server_info(self, prober: HttpProber, port: int, address: str) -> Mapping[str, Any] | None:
        return await read_server_info(prober, port, address)

    def running_mismatches(self, prefill: tuple[str, Mapping[str, Any]],
                           decode: tuple[str, Mapping[str, Any]]) -> list[Mismatch]:
        return pairing.running_mismatches(prefill, decode)

    async def pair(self, send: PairSend, prompt: str, *, max_new_tokens: int,
                   bootstrap: tuple[str, int]) -> PairAnswers:
        return await pd_request.pair(send, prompt, max_new_tokens=max_new_tokens, bootstrap=bootstrap)

    def command_line(self, deployment: Deployment, cfg: ServiceConfig, metrics_port: int | None = None,
                     backend_urls: Mapping[str, str] | None = None) -> list[str]:
        return launch.command_line(deployment, cfg, metrics_port, backend_urls)

    def slow(self, seconds: float, last: float | None) -> bool:
        return phases.slow(seconds, last)

    def phase_durations(self, starts: Sequence[tuple[str, float]]) -> dict[str, float]:
        return phases.durations(starts)

    def environment(self, deployment: Deployment, cfg: ServiceConfig) -> Mapping[str, str]:
        return launch.environment(deployment, cfg)

    def pd_roles(self, words: Sequence[str]) -> frozenset[str] | None:
        return launch.roles_of(words)

    command_flags = launch.FLAGS
    arguments_probe = ArgumentsProbe(launch.SERVER_MODULE, arguments.DISTRIBUTIONS, arguments.PROBE, arguments.ENV_PREFIX)

    def runs_server(self, words: Sequence[str]) -> bool:
        return launch.runs_server(words)


ENGINE = VLLM()
"""What :func:`pdtui.servers.serving_named` finds for ``engine: vllm``."""
