"""The serving engines pdtui brings up, one package each (SGLang, vLLM), behind :class:`ServingEngine`.

A serving engine's package holds what is its own: how its servers and router
are launched (``launch``), what their log lines mean (``signatures``, read by
the engine's judge through the types of vocabulary/signatures.py), their start-up
phases, their live figures, its own readiness checks (SGLang's prefill
bootstrap server) and the request a prefill and a decode are paired by. The
engine's service runs reach it only through :func:`serving_for`: another
engine is one package more and an entry in :data:`ENGINES`.
Each package's ``engine`` module declares it (declared.py's
:class:`~pdtui.servers.declared.DeclaredEngine`: its phase and signature tables,
its modules, the few facts that are data); what every engine does alike with
them is written there once. The generic checks that read a serving engine's
answers (a generation by its tokens, the KV transfer series, the pairs) are in
engine/checks/.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pdtui.config.defaults import DEFAULT_ENGINE

if TYPE_CHECKING:
    from pdtui.config import Deployment, ServiceConfig
    from pdtui.hosts.http import HttpProber, HttpResult
    from pdtui.vocabulary.checks import ReadinessCheck
    from pdtui.vocabulary.figures import Figures, KvTotals, TransferQueues
    from pdtui.vocabulary.signatures import Signature


@dataclass(frozen=True, slots=True)
class ServerCommand:
    """What a server will run, read before it starts: its command line's words, its environment, and where that
    was read (its installed unit, or its ``launch:`` block), as a finding names it."""

    words: tuple[str, ...]
    env: Mapping[str, str]
    source: str


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Two servers (or one server and its host) that cannot work together as they will run: a refusal
    (``error``) or a ``warning``, naming the setting, both values and where each was read."""

    level: str                      # error | warning
    kind: str                       # pair (a prefill against a decode, as they will run) | running (the same, as
                                    # they run) | host (servers sharing one host) | fabric (a server against the
                                    # RDMA devices, modules and limits of its host) | flags (a server's launch
                                    # against the parser of the engine installed on its host)
    services: tuple[str, ...]       # the one it fails first
    setting: str
    values: tuple[str, ...]
    sources: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class TransferPath:
    """How a server will move KV, read from its command line: its transfer backend, whether that registers memory
    with RDMA devices (and so needs them up, GPU memory registrable and enough locked memory), the devices it names
    (empty: the backend picks its own)."""

    backend: str
    rdma: bool
    devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ArgumentsProbe:
    """How an engine's installed server is asked what it takes (servers/arguments.py): the module its servers run,
    the distributions whose installed version names it, its ``parser()`` for the probe, and the prefix of the
    environment variables it lists (empty: it lists none pdtui trusts)."""

    module: str
    distributions: tuple[str, ...]
    parser: str
    env_prefix: str = ""


class PairSend(Protocol):
    """Sends one request of a pair's to its prefill or its decode, as pdtui's probes send (their timeout, their
    address): the serving engine says what, in what order. A POST of ``body``; a GET without one."""

    def __call__(self, side: Literal["prefill", "decode"], path: str,
                 body: dict[str, Any] | None = None) -> Awaitable[HttpResult]:
        ...


@dataclass(frozen=True, slots=True)
class PairAnswers:
    """A pair's request as each side answered it, and how its KV transfer's failure is found: what a log line of
    this request's transfer names (``needle``), and what an answer's error holds when it is a transfer's
    (``transfer_mark``; None: an answer never says)."""

    prefilled: HttpResult
    decoded: HttpResult | None      # None: the decode was not asked (``failure`` says why)
    needle: str = ""
    transfer_mark: str | None = None
    failure: str | None = None      # what the engine saw fail before the decode's answer could say


class PhaseTracking(Protocol):
    """One invocation's start-up phases so far, told by its own lines."""

    @property
    def current(self) -> str | None: ...

    @property
    def over(self) -> bool:
        """The ready line came: no later line begins a phase."""

    @property
    def serving_http(self) -> bool:
        """Its lines say its HTTP server is up (it answers requests while it still warms up)."""

    def feed(self, message: str) -> str | None:
        """The phase ``message`` begins (only ever a later one than the current), else None."""


class ServingEngine(Protocol):
    """What a service's run needs of the software its servers run."""

    @property
    def name(self) -> str:
        """Its name in the config (``engine:``)."""

    @property
    def phase_labels(self) -> Mapping[str, str]:
        """Each start-up phase's words."""

    @property
    def hang_prone(self) -> Mapping[str, str]:
        """The phases its servers are known to hang in, in a warning's words."""

    def signatures_for(self, role: str, extra: Sequence[str] = ()) -> tuple[Signature, ...]:
        """What a role's log lines mean, with the user's own ``fail:`` patterns."""

    def request_line(self, message: str) -> bool:
        """Whether a line only records an HTTP request its server or router answered (an access line, whoever
        asked): no news of how its start-up goes, so it does not bring a waiting service's next probe sooner."""

    def phase_tracker(self) -> PhaseTracking:
        """A fresh invocation's phases."""

    def slow_from(self, last: float) -> float:
        """How long a phase runs before it is told as slow, given its length in the last successful run."""

    def batch_line(self, message: str) -> bool:
        """Whether a serving line may carry figures (read later with :meth:`batch_figures`): a cheap look."""

    def batch_figures(self, message: str) -> Figures | None:
        """A serving line's figures (a scheduler's batch line), None for other lines."""

    def backend_checks(self) -> tuple[ReadinessCheck, ...]:
        """Its own readiness checks of a backend, after the generic ones (TCP, HTTP)."""

    def page_size(self, command: ServerCommand | None, info: Mapping[str, Any] | None) -> int | None:
        """A server's KV page (block) size in tokens: as it says it runs (its ``/server_info``), else as its
        command line sets it; None where neither tells."""

    def health_path(self, path: str | None) -> str | None:
        """Where a server's health is asked first, for the configured ``path``: a path of its servers that answers
        the same without generating, where the engine has one, else ``path``."""

    def follower_ready(self, message: str) -> bool:
        """Whether a line says a rank >= 1 of a server over several nodes is ready (it prints no ready line)."""

    def peer_lost(self, reason: str) -> bool:
        """Whether a rank's failure says another rank of its server went first (a consequence, not the cause)."""

    @property
    def metrics_hint(self) -> str:
        """What its servers' figures beyond their batch lines need ("TTFT needs ...")."""

    @property
    def router_puts_back(self) -> bool:
        """Its router's worker API puts a worker taken out back (a drain's end)."""

    @property
    def kv_series_role(self) -> str:
        """The role whose servers count each KV transfer (SGLang's prefill sends, vLLM's decode pulls): the series
        read around a request."""

    @property
    def failed_transfers_series(self) -> str:
        """The counter of a server's failed KV transfers, as a warning names it."""

    def figures(self, text: str, at: float, previous: Any, role: str) -> tuple[Any, Figures]:
        """A server's (or its router's, ``role`` "router") ``/metrics`` text read at ``at``: the sample kept for the
        next reading, and its figures since ``previous`` (ValueError, KeyError...: not its metrics)."""

    def metrics_ports(self, deployment: Deployment) -> Mapping[str, int]:
        """The routers whose units pdtui makes, by name: the port their figures are read at."""

    def kv_totals(self, text: str) -> KvTotals:
        """A server's KV transfer series in its ``/metrics`` text, summed over its ranks (ValueError: not metrics)."""

    def transfer_queues(self, text: str) -> TransferQueues | None:
        """The requests a server's ``/metrics`` text holds for a KV transfer, by stage in its engine's words (None:
        it exports no such gauge; ValueError: not metrics)."""

    def planned_command(self, deployment: Deployment, cfg: ServiceConfig) -> ServerCommand | None:
        """What a server's ``launch:`` block runs (None: it has none)."""

    def pair_mismatches(self, prefill: tuple[str, ServerCommand], decode: tuple[str, ServerCommand]) -> list[Mismatch]:
        """What keeps a prefill and a decode, as each will run, from moving KV between them."""

    def host_mismatches(self, servers: Sequence[tuple[ServiceConfig, ServerCommand]]) -> list[Mismatch]:
        """What the servers of one host, as each will run, get in each other's way (ports) or their own (GPUs)."""

    def transfer_path(self, command: ServerCommand) -> TransferPath | None:
        """How a server, as it will run, moves KV (None: its command line does not say, e.g. a wrapper script)."""

    async def server_info(self, prober: HttpProber, port: int, address: str) -> Mapping[str, Any] | None:
        """A running server's own account of how it runs (None: it gives none)."""

    def running_mismatches(self, prefill: tuple[str, Mapping[str, Any]],
                           decode: tuple[str, Mapping[str, Any]]) -> list[Mismatch]:
        """A ready prefill and decode, as each says it runs: what keeps them from moving KV between them."""

    async def pair(self, send: PairSend, prompt: str, *, max_new_tokens: int,
                   bootstrap: tuple[str, int]) -> PairAnswers:
        """One generation through one prefill and one decode, sent (by ``send``) as its router would send it:
        what proves that pair, whatever the router would choose. ``bootstrap``: where the router says the decode
        finds the prefill (its host and bootstrap port), for an engine whose request names it."""

    # What the targets write and the faces tell: its own, so neither imports its package.

    @property
    def title(self) -> str:
        """Its servers' name in a unit's description and a job's comment."""

    def command_line(self, deployment: Deployment, cfg: ServiceConfig, metrics_port: int | None = None,
                     backend_urls: Mapping[str, str] | None = None) -> list[str]:
        """What a service's ``launch:`` block runs: one command for a unit's ExecStart and a job's script alike.
        ``backend_urls``: a router's backends known only at run time (jobs on the nodes Slurm picked), by name."""

    def slow(self, seconds: float, last: float | None) -> bool:
        """Whether a finished phase is told as slow, given its length in the last successful run (None: none)."""

    def phase_durations(self, starts: Sequence[tuple[str, float]]) -> dict[str, float]:
        """Each phase's length from (phase, start) pairs in order; the last has none: nothing ended it yet."""

    def environment(self, deployment: Deployment, cfg: ServiceConfig) -> Mapping[str, str]:
        """What a service's environment needs beside its launch's own ``env`` (which wins where both set one)."""

    def pd_roles(self, words: Sequence[str]) -> frozenset[str] | None:
        """The PD roles a server's command line may play (None: it says none, a wrapper script may set it)."""

    @property
    def command_flags(self) -> CommandFlags:
        """How a unit written by hand is read back against the config."""

    @property
    def arguments_probe(self) -> ArgumentsProbe:
        """How its installed release is asked for the flags it takes."""

    def runs_server(self, words: Sequence[str]) -> bool:
        """Whether a command line is its server itself: a wrapper script may set the flags where pdtui cannot read."""


@dataclass(frozen=True, slots=True)
class CommandFlags:
    """The flags a serving engine's command lines say a server's (or router's) settings by, and what a server
    that does not say them gets: what an installed unit's drift from the config is read with."""

    port: str                       # where a server or router listens
    default_port: int               # ... when a server's command line does not say
    mode: str                       # a server's PD role (prefill, decode)
    bootstrap_port: str             # a prefill's bootstrap server's port
    default_bootstrap_port: int
    base_gpu: str                   # its first GPU; the tensor parallel size counts up from it
    tp: tuple[str, ...]             # the tensor parallel size, each spelling (the first is the one a finding names)
    numa: str                       # the NUMA node it binds itself to
    backends: Mapping[str, str]     # a router's backend URLs of each role
    server: str                     # the server's program, as a note names it
    nnodes: str = "--nnodes"        # a server over several nodes: how many, this unit's rank, where they meet
    node_rank: str = "--node-rank"
    dist_init_addr: str = "--dist-init-addr"
    page: str = "--page-size"       # its KV cache's page (block) of tokens


ENGINES: Mapping[str, str] = {"sglang": "pdtui.servers.sglang.engine", "vllm": "pdtui.servers.vllm.engine"}
"""Each serving engine a config may name (``engine:``; the config's own list is config/defaults.py's), by the
module whose ``ENGINE`` it is: a third engine is a package more and a line here."""


@cache
def serving_named(name: str) -> ServingEngine:
    """A serving engine by its name in the config. Its package is imported at the first call, once (it imports this
    module's types)."""
    engine: ServingEngine = importlib.import_module(ENGINES[name]).ENGINE
    return engine


def serving_for(cfg: ServiceConfig) -> ServingEngine:
    """The serving engine a service runs (a router: the engine whose router it is), as its config says."""
    return serving_named(cfg.engine)


def default_serving() -> ServingEngine:
    """The serving engine of what has no service at hand (the run history of a deployment no longer configured)."""
    return serving_named(DEFAULT_ENGINE)


# What the preflight's flags check (engine/checks/flags.py) asks of an installed engine's parser, and keeps.
from pdtui.servers.arguments import MARK as ARGUMENTS_MARK  # noqa: E402
from pdtui.servers.arguments import EngineArguments, probe_program, unknown_env, unknown_words  # noqa: E402
from pdtui.servers.arguments_cache import ArgumentsCache  # noqa: E402
from pdtui.servers.arguments_probe import describe as describe_parser  # noqa: E402

__all__ = ["ARGUMENTS_MARK", "ArgumentsCache", "EngineArguments", "describe_parser", "probe_program",
           "unknown_env", "unknown_words"]
