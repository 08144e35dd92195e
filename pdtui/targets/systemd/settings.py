"""systemd's settings of the config: the section ``hosts:`` (machines reached over SSH, or this one) and a
service's ``host:`` (or ``hosts:``, a server over several nodes), ``unit:`` and ``replaces:``, with their
validation: a kind of place (pdtui/config/placement.py), which pdtui/targets/__init__.py registers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonDict, JsonSchemaValue
from pydantic_core import CoreSchema

from pdtui.config.defaults import BACKEND_ROLES, SGLANG_FOLLOWER_READY_LINE
from pdtui.config.errors import did_you_mean, fail, show, show_key
from pdtui.config.fields import AbsoluteDir, Bool, Check, GpuIndexes, HostName, NumaNode, Port, listed
from pdtui.config.placement import PlacementKind
from pdtui.config.places import Reached, commands_check, each_itself
from pdtui.config.schema import RANK_MARK, Claim, Deployment, ReadySpec, ServiceConfig, dist_port, no_default

COMMANDS: tuple[str, ...] = ("systemctl", "journalctl", "nvidia-smi")
"""What a host runs for pdtui, each as its ``commands:`` says (itself on the PATH by default)."""

_UNIT_CHAR = r"A-Za-z0-9:_.\\@"      # and '-', never first
_UNIT_CHARS = re.compile(rf"[{_UNIT_CHAR}-]+")
_UNIT_TYPES = frozenset(
    {"service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"}
)


def normalize_unit(value: Any) -> str:
    """A systemd service unit name, with ``.service`` appended when no suffix is given.

    Unit names go on command lines (over SSH, through a shell): only systemd's
    own character set is let through.
    """
    if not isinstance(value, str) or not value:
        raise fail(f"expected a systemd unit name, got {show(value)}")
    if not _UNIT_CHARS.fullmatch(value) or value.startswith("-"):
        raise fail(
            f"expected a systemd unit name (letters, digits and : _ . \\ @ - only, not starting with '-'), "
            f"got {show(value)}"
        )
    suffix = value.rpartition(".")[2]
    if "." in value and suffix in _UNIT_TYPES and suffix != "service":
        raise fail(f"expected a .service unit, got {show(value)}")
    unit = value if value.endswith(".service") else value + ".service"
    stem = unit.removesuffix(".service")
    if not stem or stem.startswith("@") or stem.endswith("@"):
        raise fail(f"expected a unit name (a template needs an instance, like name@1), got {show(value)}")
    if len(unit) > 255:
        raise fail(f"expected a unit name of at most 255 characters, got {len(unit)}")
    return unit


UNIT = Check(normalize_unit, accepts={
    "type": "string", "pattern": rf"^[{_UNIT_CHAR}][{_UNIT_CHAR}-]*$",
    "description": 'a systemd unit name (".service" optional)'})
Unit = Annotated[str, UNIT]


class HostConfig(Reached):
    """A machine the deployment's units run on, reached over SSH or (``local``) directly."""

    KIND: ClassVar[str] = "host"
    EXPECTED: ClassVar[str] = "a mapping of host settings (address, user, port, ...)"

    sudo: Bool = False
    unit_dir: AbsoluteDir = "/etc/systemd/system"    # where `pdtui units --install` writes units
    secret_dir: AbsoluteDir = "/etc/pdtui/env"       # ... and each unit's secrets (0600 files in a 0700 folder)
    sysfs: AbsoluteDir = "/sys"                      # where the preflight reads its RDMA devices and modules
    commands: Annotated[dict[str, tuple[str, ...]], commands_check(COMMANDS)] = Field(
        default_factory=lambda: each_itself(COMMANDS))


class NodeConfig(BaseModel):
    """One node of a server that spans several (an entry of its ``hosts:``): its host, and where they differ
    from the server's, its GPUs, NUMA node and HTTP port (two nodes on one machine need ports of their own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    EXPECTED: ClassVar[str] = "a host name, or a mapping of a node's host and its gpus, numa, port or unit"

    host: HostName
    gpus: GpuIndexes | None = None
    numa: NumaNode | None = None
    port: Port | None = None
    unit: Unit | None = None     # two nodes on one machine: a unit each

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """A bare host name is a node on that host with the server's GPUs, NUMA node and port."""
        return {"host": data} if isinstance(data, str) else data

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """For editors: a node is a host's name too (see :meth:`_named`)."""
        return {"anyOf": [{"type": "string", "minLength": 1, "description": "a host name"}, handler(schema)]}


def _nodes(value: Any) -> Any:
    """A server's nodes, rank 0 first: two at least (one node is ``host:``)."""
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        got = f"{len(value)} host{'s' if len(value) != 1 else ''}" if isinstance(value, (list, tuple)) else show(value)
        raise fail(f"expected a list of two or more hosts, rank 0 first (one host: host: NAME), got {got}")
    return value


def _nodes_schema(schema: JsonDict) -> None:
    """For editors: two nodes or more (see :func:`_nodes`); none is no value to offer."""
    no_default(schema)
    schema["minItems"] = 2


class UnitService(ServiceConfig):
    """A service as a systemd unit on its host, or (``hosts:``) a server over several nodes, a unit on each."""

    # A server over several nodes: rank 0 first.
    hosts: Annotated[tuple[NodeConfig, ...], BeforeValidator(_nodes)] = Field((), json_schema_extra=_nodes_schema)
    unit: Unit | None = None     # its unit's name
    replaces: Annotated[tuple[str, ...], listed(UNIT, "a list of unit names")] = ()

    @property
    def nnodes(self) -> int:
        return max(1, len(self.hosts))

    def config_path(self) -> tuple[str | int, ...]:
        """A rank >= 1 is its node in its server's ``hosts``."""
        return ("services", self.server, "hosts", self.rank) if self.follower else super().config_path()

    @model_validator(mode="after")
    def _units_consistent(self) -> Self:
        if self.engine != "sglang" and self.hosts:
            raise fail(f"service '{self.name}' runs {self.engine}: a server over several nodes is SGLang's here (a "
                       "vLLM prefill is found through its NIXL side channel, and pdtui brings up a vLLM server on one "
                       "node)", "hosts", on="key")
        if self.unit in self.replaces:
            raise fail(f"service '{self.name}' cannot replace its own unit {self.unit}", "replaces",
                       self.replaces.index(self.unit))
        if self.hosts:
            self._check_nodes()
        return self

    def _check_nodes(self) -> None:
        """A server over several nodes: an SGLang prefill or decode, the same number of GPUs on each node, a
        tensor-parallel size its nodes share evenly."""
        if self.role not in BACKEND_ROLES:
            raise fail(f"service '{self.name}' is a {self.role}: only a prefill or decode server spans several "
                       "nodes", "hosts", on="key")
        counts = [len(self.gpus if node.gpus is None else node.gpus) for node in self.hosts]
        for rank, node in enumerate(self.hosts):
            if counts[rank] != counts[0]:
                raise fail(f"rank {rank} of service '{self.name}' on '{node.host}' has {counts[rank]} GPUs, rank 0 "
                           f"has {counts[0]}: SGLang runs tp / nnodes ranks on every node, expected the same number "
                           "on each", "hosts", rank, *(("gpus",) if node.gpus is not None else ()))
            for index, gpu in enumerate(node.gpus or ()):
                if gpu in (node.gpus or ())[:index]:
                    raise fail(f"GPU {gpu} is listed twice in rank {rank} of service '{self.name}'", "hosts", rank,
                               "gpus", index)
        tp = self.launch.tp if self.launch is not None else None
        if tp is not None and tp % self.nnodes:
            raise fail(f"tp {tp} of service '{self.name}' does not divide among its {self.nnodes} nodes: SGLang runs "
                       f"tp / nnodes ranks on each, expected a multiple of {self.nnodes}", "launch", "tp")
        if tp is not None and counts[0] and tp // self.nnodes > counts[0]:
            raise fail(f"tp {tp} of service '{self.name}' puts {tp // self.nnodes} ranks on each of its "
                       f"{self.nnodes} nodes, which have {counts[0]} GPUs each", "launch", "tp")

    def ranks(self) -> tuple[ServiceConfig, ...]:
        """Its ranks >= 1, each a service of its own on its node (rank 0 is this one): the same unit, flags and
        timeouts; the node's host, GPUs, NUMA node and port; a follower's readiness; named ``NAME@RANK``."""
        followers = []
        for rank, node in enumerate(self.hosts[1:], 1):
            update: dict[str, Any] = {
                "name": f"{self.name}{RANK_MARK}{rank}", "host": node.host,
                "gpus": self.gpus if node.gpus is None else node.gpus,
                "numa": self.numa if node.numa is None else node.numa, "port": node.port or self.port,
                "unit": node.unit or self.unit,
                "ready": ReadySpec(log=SGLANG_FOLLOWER_READY_LINE, http="/health" if (node.port or self.port) else None),
            }
            follower = self.model_copy(update=update)
            follower._rank = rank
            followers.append(follower)
        return tuple(followers)


class Units(PlacementKind):
    """Services as units on hosts: the first kind of every config."""

    def fill(self, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        """A server over several nodes: its commands run on rank 0's host first, and ``host`` is that host."""
        if "hosts" not in entry:
            return entry
        if "host" in entry:
            raise fail(f"service '{entry.get('name')}' has host and hosts, expected one of them (one host, or several)",
                       "hosts", on="key")
        nodes = entry["hosts"]
        first = nodes[0] if isinstance(nodes, (list, tuple)) and nodes else None
        host = first.get("host") if isinstance(first, Mapping) else first
        return {**entry, "host": host} if isinstance(host, str) else entry

    def check_service(self, deployment: Deployment, name: str, svc: ServiceConfig) -> None:
        hosts, nodes = deployment.places(HostConfig), svc.settings(UnitService).hosts
        if svc.host not in hosts:
            raise fail(f"unknown host {show_key(svc.host)}, expected one of {', '.join(hosts)}"
                       f"{did_you_mean(svc.host, hosts)}",
                       "services", name, "host" if not nodes else "hosts", *((0,) if nodes else ()))
        for rank, node in enumerate(nodes):
            if node.host not in hosts:
                raise fail(f"unknown host {show_key(node.host)} for rank {rank}, expected one of {', '.join(hosts)}"
                           f"{did_you_mean(node.host, hosts)}", "services", name, "hosts", rank)

    def claims(self, svc: ServiceConfig) -> tuple[Claim, ...]:
        """A unit's name, on its host."""
        unit = svc.settings(UnitService).unit
        return (Claim(unit, f"unit {unit} on host '{svc.host}'", (*svc.config_path(), "unit")),) if unit else ()

    def check_deployment(self, deployment: Deployment) -> None:
        """A server over several nodes meets at rank 0's host, on a port no other service of that host takes, at
        an address every node reaches."""
        hosts = deployment.places(HostConfig)
        for name, svc in deployment.services.items():
            if svc.nnodes < 2 or svc.follower:
                continue
            port = dist_port(svc)
            for other in deployment.services.values():
                if other.host == svc.host and port in (other.port, other.bootstrap_port if not other.follower else None):
                    raise fail(f"rendezvous port {port} of service '{name}' on host '{svc.host}' is already used by "
                               f"service '{other.name}' (give launch: dist_port)", "services", name,
                               *(("launch", "dist_port") if svc.launch and svc.launch.dist_port else ("hosts", 0)))
            if svc.launch is not None and svc.launch.dist_addr is None and hosts[svc.host].local and not all(
                    hosts[node.host].local for node in svc.settings(UnitService).hosts):
                raise fail(f"rank 0 of service '{name}' is on '{svc.host}', this machine (local: true): its other "
                           "nodes cannot reach it at 127.0.0.1, expected launch: dist_addr (an address they reach it "
                           "at)", "services", name, "hosts", 0)


UNITS = Units("hosts", HostConfig, UnitService, ("host", "hosts"), "a unit on a host", required=("unit",),
              items={"hosts": "rank {index} of service {service} (its hosts entry)"})


def hosts_of(deployment: Deployment) -> dict[str, HostConfig]:
    """The deployment's hosts (its ``hosts:``)."""
    return deployment.places(HostConfig)


def unit_service(cfg: ServiceConfig) -> UnitService:
    """A service as systemd reads it: its unit, its nodes, what it replaces."""
    return cfg.settings(UnitService)
