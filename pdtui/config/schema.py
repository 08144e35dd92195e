"""The schema: pydantic models that check types, fill the role defaults and cross-check services."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict, JsonSchemaValue, SkipJsonSchema
from pydantic_core import CoreSchema, PydanticCustomError

from pdtui.config import graph
from pdtui.config.defaults import (
    BACKEND_ROLES,
    COMMANDS,
    DEFAULT_CANARY,
    DEFAULT_DIST_PORT,
    DEFAULT_ENGINE,
    DEFAULT_TIMEOUT,
    DEFAULT_UNHEALTHY_AFTER,
    ENGINES,
    READY_LINES,
    ROLES,
    SGLANG_FOLLOWER_READY_LINE,
    Role,
)
from pdtui.config.errors import did_you_mean, fail, show, show_key, unknown_key
from pdtui.config.fields import (
    DURATION,
    ENV_NAME,
    INTERVAL_OR_OFF,
    NAME_PATTERN,
    REGEX,
    UNIT,
    AbsoluteDir,
    Address,
    Bool,
    DeploymentName,
    Duration,
    Engine,
    FilePath,
    GpuIndexes,
    HostName,
    LogRegex,
    NumaNode,
    Port,
    Unit,
    UserName,
    check_name,
    check_role,
    config_name,
    listed,
)
from pdtui.config.job import SLURM_COMMANDS, JobSpec, OutputDir, check_job, slurm_word
from pdtui.config.launch import LaunchSpec, check_launch_keys
from pdtui.config.secrets import SECRET_WORDS
from pdtui.config.yamlpos import Positions
from pdtui.support.redact import Redactor
from pdtui.support.text import inert

RANK_MARK = "@"     # a server's rank >= 1 is the service SERVER@RANK (no name the config gives has one)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _commands_schema(names: tuple[str, ...]) -> dict[str, Any]:
    """What :func:`_commands` accepts, for editors: each of ``names`` as a string (split like a shell would) or an
    argv list, and no other name."""
    argv = {"anyOf": [{"type": "string", "minLength": 1},
                      {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}]}
    return {"type": "object", "properties": {name: argv for name in names}, "additionalProperties": False,
            "description": f"how {', '.join(names)} are run here: a command line or an argv list each"}


def _no_default(schema: JsonDict) -> None:
    """For editors: no ``default`` where the model's is no value the file may give (pdtui decides: a stall window, a
    canary interval; or none at all), lest an editor offer it."""
    schema.pop("default", None)


def _required_one_of(*keys: str, filled: tuple[str, ...] = ()) -> Callable[[JsonDict], None]:
    """A model's JSON Schema edited to say what its file requires: one of ``keys`` (each model requires none of
    them), and not ``filled``, which the model requires but the loader fills when the file leaves them out."""
    def edit(schema: JsonDict) -> None:
        required = schema.pop("required", [])
        kept = [key for key in required if key not in filled] if isinstance(required, list) else []
        schema.update({"required": kept} if kept else {})
        schema["anyOf"] = [{"required": [key]} for key in keys]
    return edit


class ReadySpec(_Model):
    """What must hold for a service to count as ready: every check given."""

    log: LogRegex = None
    http: Annotated[str | None, WithJsonSchema(
        {"anyOf": [{"type": "string", "pattern": r"^/\S*$", "description": "an HTTP path, like /health"},
                   {"type": "null"}]})] = None
    tcp: Bool = False

    @field_validator("http", mode="before")
    @classmethod
    def _http_path(cls, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.startswith("/") or not value.isprintable() or " " in value:
            raise fail(f"expected an HTTP path starting with '/', like /health, got {show(value)}")
        return value


class _Reached(_Model):
    """A machine pdtui reaches: over SSH (address, user, port, known_hosts) or directly (``local``)."""

    KIND: ClassVar[str] = "host"

    name: SkipJsonSchema[str]     # its key in the file
    address: Address | None = None
    local: Bool = False
    user: UserName | None = None
    port: Port | None = None
    known_hosts: FilePath | None = None

    @model_validator(mode="after")
    def _address_or_local(self) -> Self:
        if self.local and self.address is not None:
            raise fail(f"{self.KIND} '{self.name}' has both an address and local: true, expected one of them", "local",
                       on="key")
        if not self.local and self.address is None:
            raise fail(f"{self.KIND} '{self.name}' needs an address (or local: true)", on="key")
        return self


class HostConfig(_Reached):
    """A machine the deployment's units run on, reached over SSH or (``local``) directly."""

    sudo: Bool = False
    unit_dir: AbsoluteDir = "/etc/systemd/system"    # where `pdtui units --install` writes units
    secret_dir: AbsoluteDir = "/etc/pdtui/env"       # ... and each unit's secrets (0600 files in a 0700 folder)
    sysfs: AbsoluteDir = "/sys"                      # where the preflight reads its RDMA devices and modules
    commands: Annotated[dict[str, tuple[str, ...]], WithJsonSchema(_commands_schema(COMMANDS))] = Field(
        default_factory=lambda: _default_commands(COMMANDS))

    @field_validator("commands", mode="before")
    @classmethod
    def _commands(cls, value: Any) -> dict[str, tuple[str, ...]]:
        return _commands(COMMANDS, value)


class ClusterConfig(_Reached):
    """A Slurm cluster, reached through its login host (over SSH, or ``local``: this machine is one).

    Jobs write their script and output under ``output_dir``, a folder the nodes
    and the login host share: pdtui follows a job's output there.
    """

    KIND: ClassVar[str] = "cluster"

    output_dir: OutputDir
    partition: Annotated[str, slurm_word("a partition name")] | None = None
    account: Annotated[str, slurm_word("an account name")] | None = None
    commands: Annotated[dict[str, tuple[str, ...]], WithJsonSchema(_commands_schema(SLURM_COMMANDS))] = Field(
        default_factory=lambda: _default_commands(SLURM_COMMANDS))

    @field_validator("commands", mode="before")
    @classmethod
    def _commands(cls, value: Any) -> dict[str, tuple[str, ...]]:
        return _commands(SLURM_COMMANDS, value)


def _commands(names: tuple[str, ...], value: Any) -> dict[str, tuple[str, ...]]:
    """Fill every command; a string is split like a shell would, a list is taken as argv."""
    if not isinstance(value, Mapping):
        raise fail(f"expected a mapping of {', '.join(names)} to commands, got {show(value)}")
    commands = _default_commands(names)
    for key, argv in value.items():
        if key not in names:
            raise fail(f"unknown command {show_key(key)}, expected one of {', '.join(names)}{did_you_mean(key, names)}",
                       key, on="key")
        commands[key] = _argv(key, argv)
    return commands


def _default_commands(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Each command as itself (found on the machine's PATH)."""
    return {name: (name,) for name in names}


def _argv(command: str, value: Any) -> tuple[str, ...]:
    expected = f"a command for {command}: a string or a non-empty list of strings"
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise fail(f"expected {expected}, got {show(value)} ({exc})", command) from None
    elif isinstance(value, (list, tuple)):
        for index, word in enumerate(value):
            if not isinstance(word, str) or not word:
                raise fail(f"expected {expected}, got {show(word)}", command, index)
        argv = list(value)
    else:
        raise fail(f"expected {expected}, got {show(value)}", command)
    if not argv:
        raise fail(f"expected {expected}, got an empty command", command)
    return tuple(argv)


def _default_ready(role: str, port: Any, engine: str) -> dict[str, Any]:
    if role in BACKEND_ROLES:
        return {"log": READY_LINES[engine], "http": "/health", "tcp": False}
    if role == "router":
        return {"log": None, "http": None, "tcp": True}
    return {"log": None, "http": None, "tcp": port is not None}


class NodeConfig(_Model):
    """One node of a server that spans several (an entry of its ``hosts:``): its host, and where they differ
    from the server's, its GPUs, NUMA node and HTTP port (two nodes on one machine need ports of their own)."""

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
    _no_default(schema)
    schema["minItems"] = 2


class ServiceConfig(_Model):
    """One service of the deployment (a systemd unit on a host, or a Slurm job on a cluster) and how to tell
    it is ready."""

    # For editors: a unit on a host, a job on a cluster, or a server over several nodes; its timeout, readiness
    # checks and (a job, a server over several nodes) host are filled when the file leaves them out.
    model_config = ConfigDict(json_schema_extra=_required_one_of("host", "cluster", "hosts",
                                                                 filled=("host", "timeout", "ready")))

    name: SkipJsonSchema[str]    # its key in the file
    host: HostName               # where its commands run: its host, or (a job) its cluster's login host
    # A server over several nodes: rank 0 first.
    hosts: Annotated[tuple[NodeConfig, ...], BeforeValidator(_nodes)] = Field((), json_schema_extra=_nodes_schema)
    cluster: HostName | None = None  # set for a Slurm job: ``host`` is then the cluster's name too
    unit: Unit | None = None     # a unit's name; a job is found by its job's name
    role: Annotated[Role, BeforeValidator(check_role)] = "other"
    engine: Engine = DEFAULT_ENGINE   # what it runs (a router: whose router)
    gpus: GpuIndexes = ()
    numa: NumaNode | None = None
    port: Port | None = None
    bootstrap_port: Port | None = None            # a prefill's bootstrap server (default: /server_info, else 8998)
    replaces: Annotated[tuple[str, ...], listed(UNIT, "a list of unit names")] = ()
    timeout: Duration
    unhealthy_after: Duration = DEFAULT_UNHEALTHY_AFTER
    # No line this long in a start-up phase known to hang: a warning, and a timeout names where it stopped.
    # Default: timeout / 4, >= 1m, <= timeout / 2.
    stall_after: Annotated[float | None, DURATION] = Field(None, json_schema_extra=_no_default)
    canary: Annotated[float | None, INTERVAL_OR_OFF] = Field(None, json_schema_extra=_no_default)   # a router's (30s)
    api_key_env: Annotated[str | None, ENV_NAME] = Field(None, json_schema_extra=_no_default)   # a router's API key
    ready: ReadySpec
    fail: Annotated[tuple[str, ...], listed(REGEX, "a list of regular expressions")] = ()
    after: Annotated[tuple[str, ...], listed(config_name("service"), "a list of service names")] = ()
    launch: LaunchSpec | None = None
    job: JobSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _on_cluster(cls, data: Any) -> Any:
        """A job on a cluster: its commands run on the cluster's login host, under the cluster's name."""
        if not isinstance(data, Mapping) or "cluster" not in data:
            return data
        if "host" in data:
            raise fail(f"service '{data.get('name')}' has a host and a cluster, expected one of them (a unit on a "
                       f"host, or a job on a cluster)", "cluster", on="key")
        filled = {**data, "job": data.get("job", {})}
        if isinstance(data["cluster"], str):
            filled["host"] = data["cluster"]
        return filled

    @model_validator(mode="before")
    @classmethod
    def _on_nodes(cls, data: Any) -> Any:
        """A server over several nodes: its commands run on rank 0's host first, and ``host`` is that host."""
        if not isinstance(data, Mapping) or "hosts" not in data:
            return data
        for key in ("host", "cluster"):
            if key in data:
                what = "a job's nodes are job: nodes: N" if key == "cluster" else "one host, or several"
                raise fail(f"service '{data.get('name')}' has {key} and hosts, expected one of them ({what})", "hosts",
                           on="key")
        nodes = data["hosts"]
        first = nodes[0] if isinstance(nodes, (list, tuple)) and nodes else None
        host = first.get("host") if isinstance(first, Mapping) else first
        return {**data, "host": host} if isinstance(host, str) else data

    @model_validator(mode="before")
    @classmethod
    def _role_defaults(cls, data: Any) -> Any:
        """Fill the timeout and readiness checks the role implies; a given ``ready``
        mapping overrides the role's checks key by key. A prefill's bootstrap port
        is one fact: given in ``launch:`` it is the service's ``bootstrap_port``."""
        if not isinstance(data, Mapping):
            return data
        role = data.get("role", "other")
        role = role if role in ROLES else "other"
        filled = dict(data)
        filled.setdefault("timeout", DEFAULT_TIMEOUT[role])
        if role == "router":
            filled.setdefault("canary", DEFAULT_CANARY)
        ready = data.get("ready", {})
        engine = data.get("engine", DEFAULT_ENGINE)
        if isinstance(ready, Mapping):
            filled["ready"] = {**_default_ready(role, data.get("port"), engine if engine in ENGINES else DEFAULT_ENGINE),
                               **ready}
        launch = data.get("launch")
        if role == "prefill" and isinstance(launch, Mapping) and "bootstrap_port" in launch:
            port = launch["bootstrap_port"]
            if data.get("bootstrap_port", port) != port:
                raise fail(f"bootstrap_port {show(port)} in launch differs from the service's bootstrap_port "
                           f"{show(data['bootstrap_port'])}, expected one port (or give it once)",
                           "launch", "bootstrap_port")
            filled["bootstrap_port"] = port
            filled["launch"] = {k: v for k, v in launch.items() if k != "bootstrap_port"}
        return filled

    _rank: int = PrivateAttr(default=0)

    @property
    def rank(self) -> int:
        """Its node's rank in a server over several nodes (``nnodes``): 0 for the server itself (and for a server
        of one node), 1 and up for the ranks the deployment adds after it, named ``SERVER@RANK``."""
        return self._rank

    @property
    def nnodes(self) -> int:
        return max(1, len(self.hosts))

    @property
    def server(self) -> str:
        """The server it is a rank of: its own name, but for a rank >= 1 its rank 0's."""
        return self.name.partition(RANK_MARK)[0]

    @property
    def follower(self) -> bool:
        """A rank >= 1 of a server over several nodes: it serves no API of its own (only a dummy /health), the
        router never sees it, and it is ready when its schedulers are."""
        return self._rank > 0

    @property
    def is_router(self) -> bool:
        """The one definition of a router: its role (it comes after the backends it routes to)."""
        return self.role == "router"

    @property
    def gpu_count(self) -> int:
        """How many GPUs it runs on: its own, or those its job asks for on all of its nodes."""
        if self.job is not None:
            return (self.job.gpus_per_node or 0) * self.job.nodes
        return len(self.gpus)

    @property
    def queue_timeout(self) -> float:
        """How long its job may wait in Slurm's queue (its ``timeout`` then counts from the job's start)."""
        return self.job.queue_timeout if self.job is not None and self.job.queue_timeout else self.timeout

    @property
    def is_job(self) -> bool:
        """Whether it runs as a Slurm job (on ``cluster``) rather than as a unit on a host."""
        return self.cluster is not None

    @model_validator(mode="after")
    def _consistent(self) -> ServiceConfig:
        if self.role == "router" and self.port is None:
            raise fail(f"router service '{self.name}' needs a port", on="key")
        for check in ("http", "tcp"):
            if getattr(self.ready, check) and self.port is None:
                raise fail(f"service '{self.name}' checks readiness over {check} but has no port", "ready", check, on="key")
        for index, gpu in enumerate(self.gpus):
            if gpu in self.gpus[:index]:
                raise fail(f"GPU {gpu} is listed twice in service '{self.name}'", "gpus", index)
        if self.engine != "sglang" and (self.bootstrap_port is not None or self.hosts):
            key, what = (("bootstrap_port", "a bootstrap server") if self.bootstrap_port is not None
                         else ("hosts", "a server over several nodes"))
            raise fail(f"service '{self.name}' runs {self.engine}: {what} is SGLang's here (a vLLM prefill is found "
                       "through its NIXL side channel, and pdtui brings up a vLLM server on one node)", key, on="key")
        if self.bootstrap_port is not None and self.role != "prefill":
            raise fail(f"service '{self.name}' is a {self.role}: only a prefill has a bootstrap_port", "bootstrap_port", on="key")
        if "canary" in self.model_fields_set and not self.is_router:
            raise fail(f"service '{self.name}' is a {self.role}: only a router has a canary (a generation through it "
                       "after ready)", "canary", on="key")
        if self.api_key_env is not None:
            self._check_api_key_env(self.api_key_env)
        if self.unit in self.replaces:
            raise fail(f"service '{self.name}' cannot replace its own unit {self.unit}", "replaces", self.replaces.index(self.unit))
        if self.launch is not None:
            check_launch_keys(self.name, self.role, self.launch, nnodes=self.nnodes, engine=self.engine)
        if self.hosts:
            self._check_nodes()
        if self.job is not None and self.cluster is not None:
            self._check_job(self.job)
        elif self.job is not None:
            raise fail(f"service '{self.name}' has a job block but runs on host '{self.host}': a job runs on a "
                       f"cluster (cluster: NAME instead of host: NAME)", "job", on="key")
        elif self.unit is None:
            raise fail(f"service '{self.name}' is missing required key 'unit'", on="key")
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

    def _check_api_key_env(self, name: str) -> None:
        """A router's API key is read from pdtui's environment, under the name the config gives."""
        if not self.is_router:
            raise fail(f"service '{self.name}' is a {self.role}: only a router has an API key (api_key_env)",
                       "api_key_env", on="key")
        if not os.environ.get(name):
            raise fail(f"router '{self.name}': api_key_env names {name}, which is not set in pdtui's environment "
                       f"(export the router's API key as {name})", "api_key_env")

    @property
    def api_key(self) -> str | None:
        """Its API key, sent as a bearer token to its worker API and its generation routes (a router's)."""
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None

    def _check_job(self, job: JobSpec) -> None:
        """A job: Slurm places it (no unit, GPUs or NUMA node of its own) and runs its launch block."""
        where = f"service '{self.name}' is a job on cluster '{self.cluster}'"
        if self.unit is not None:
            raise fail(f"{where}: it has no unit (its job is found by its name, job: name)", "unit", on="key")
        for key in ("gpus", "numa", "replaces"):
            if getattr(self, key) not in (None, ()):
                raise fail(f"{where}: Slurm places it, so it has no {key} of its own (ask with job: gpus_per_node, "
                           f"gpu_type, constraint)", key, on="key")
        if self.launch is None:
            raise fail(f"{where}: it needs a launch block (its job script runs that command line)", on="key")
        check_job(self.name, self.role, job)


_NAMED: JsonDict = {"propertyNames": {"pattern": NAME_PATTERN}, "minProperties": 1}
"""For editors: a section of named entries (hosts, clusters, services), at least one, each key a name."""


class Deployment(_Model):
    """The whole deployment: hosts, services, and the order to bring them up in."""

    model_config = ConfigDict(json_schema_extra=_required_one_of("hosts", "clusters"))   # units, jobs or both

    name: DeploymentName
    hosts: dict[str, HostConfig] = Field(default_factory=dict, json_schema_extra=_NAMED)
    clusters: dict[str, ClusterConfig] = Field(default_factory=dict, json_schema_extra=_NAMED)
    services: dict[str, ServiceConfig] = Field(json_schema_extra=_NAMED)
    source: SkipJsonSchema[str] = "<config>"   # where it was read from: the loader's, never the file's
    strict: Bool = False
    engine: Engine = DEFAULT_ENGINE   # every service's, unless it says its own
    _positions: Positions | None = PrivateAttr(default=None)     # where each key and value was read (from a file)

    def where(self, *path: str | int, on: str = "value") -> str:
        """``FILE:LINE:COL`` of a key or value of the config (its nearest written ancestor's), as an error line
        begins; the source alone for a deployment not read from YAML."""
        if self._positions is None:
            return inert(self.source)
        line, col = self._positions.find(path, on)
        return f"{inert(self.source)}:{line}:{col}"

    @model_validator(mode="before")
    @classmethod
    def _name_entries(cls, data: Any) -> Any:
        """Give every host and service its key as its name; default a router's ``after``."""
        if not isinstance(data, Mapping):
            return data
        named = dict(data)
        for section, what in (("hosts", "host"), ("clusters", "cluster"), ("services", "service")):
            entries = data.get(section)
            if isinstance(entries, Mapping):
                named[section] = {key: _named(section, what, key, entry) for key, entry in entries.items()}
        if isinstance(named.get("services"), Mapping):
            named["services"] = _job_names(data.get("name"), _router_after(named["services"]))
            if data.get("engine") in ENGINES:       # else its own error, at its own key
                named["services"] = {key: {"engine": data["engine"], **entry} if isinstance(entry, Mapping) else entry
                                     for key, entry in named["services"].items()}
        if "hosts" not in data and "clusters" not in data:
            raise fail("the top level is missing required key 'hosts' (or 'clusters', for Slurm jobs)", on="key")
        return named

    @field_validator("hosts", "clusters", "services", mode="before")
    @classmethod
    def _not_empty(cls, value: Any, info: Any) -> Any:
        what = info.field_name.removesuffix("s")
        if not isinstance(value, Mapping) or not value:
            raise fail(f"expected a mapping of {what} names to {what}s (at least one), got {show(value)}")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Deployment:
        self._check_services()
        wide = self.model_copy(update={"services": _with_ranks(self.services)})
        wide._check_sharing()
        wide._check_rendezvous()
        return wide

    def _check_services(self) -> None:
        for name in self.hosts.keys() & self.clusters.keys():
            raise fail(f"'{name}' names both a host and a cluster, expected names of their own", "clusters", name, on="key")
        for name, service in self.services.items():
            if service.cluster is not None and service.cluster not in self.clusters:
                raise fail(f"unknown cluster {show_key(service.cluster)}, expected one of {', '.join(self.clusters) or '(none)'}"
                           f"{did_you_mean(service.cluster, self.clusters)}", "services", name, "cluster")
            if service.cluster is None and service.host not in self.hosts:
                raise fail(
                    f"unknown host {show_key(service.host)}, expected one of {', '.join(self.hosts)}"
                    f"{did_you_mean(service.host, self.hosts)}",
                    "services", name, "host" if not service.hosts else "hosts", *((0,) if service.hosts else ()),
                )
            for rank, node in enumerate(service.hosts):
                if node.host not in self.hosts:
                    raise fail(f"unknown host {show_key(node.host)} for rank {rank}, expected one of {', '.join(self.hosts)}"
                               f"{did_you_mean(node.host, self.hosts)}", "services", name, "hosts", rank)
            for index, dep in enumerate(service.after):
                if dep == name:
                    raise fail(f"service '{name}' cannot come after itself", "services", name, "after", index)
                if dep not in self.services:
                    raise fail(
                        f"unknown service {show_key(dep)} in after{did_you_mean(dep, self.services)}",
                        "services", name, "after", index,
                    )
        self._check_cycles()
        self._check_router_urls()

    def _check_router_urls(self) -> None:
        """A router unit's file names its backends' URLs: a backend that is a job has none until Slurm places it."""
        for name, svc in self.services.items():
            jobs = [dep for dep in svc.after if self.services[dep].is_job]
            if svc.is_router and not svc.is_job and jobs:
                raise fail(f"router '{name}' is a unit on host '{svc.host}' but '{jobs[0]}' is a job on a node Slurm "
                           f"picks: its unit cannot name that URL; run the router as a job too (cluster: "
                           f"{self.services[jobs[0]].cluster})", "services", name, "host")

    def _check_rendezvous(self) -> None:
        """A server over several nodes meets at rank 0's host, on a port no other service of that host takes, at
        an address every node reaches."""
        for name, svc in self.services.items():
            if svc.nnodes < 2 or svc.follower:
                continue
            port = dist_port(svc)
            for other in self.services.values():
                if other.host == svc.host and port in (other.port, other.bootstrap_port if not other.follower else None):
                    raise fail(f"rendezvous port {port} of service '{name}' on host '{svc.host}' is already used by "
                               f"service '{other.name}' (give launch: dist_port)", "services", name,
                               *(("launch", "dist_port") if svc.launch and svc.launch.dist_port else ("hosts", 0)))
            if svc.launch is not None and svc.launch.dist_addr is None and self.hosts[svc.host].local and not all(
                    self.hosts[node.host].local for node in svc.hosts):
                raise fail(f"rank 0 of service '{name}' is on '{svc.host}', this machine (local: true): its other "
                           "nodes cannot reach it at 127.0.0.1, expected launch: dist_addr (an address they reach it "
                           "at)", "services", name, "hosts", 0)

    def dist_addr(self, svc: ServiceConfig) -> str:
        """Where a server over several nodes meets (``--dist-init-addr``): its launch's ``dist_addr``, else rank 0's
        host's address (loopback when it is this machine)."""
        rank0 = self.services[svc.server]
        host = self.hosts[rank0.host]
        address = rank0.launch.dist_addr if rank0.launch is not None and rank0.launch.dist_addr else (
            "127.0.0.1" if host.local else host.address or rank0.host)
        return f"{address}:{dist_port(rank0)}"

    def ranks_of(self, service: str) -> tuple[str, ...]:
        """The services of the server ``service`` is (a rank of): rank 0 first; just itself for a server of one
        node."""
        server = self.services[service].server
        return (server, *(f"{server}{RANK_MARK}{rank}" for rank in range(1, self.services[server].nnodes)))

    def _check_cycles(self) -> None:
        """The entry closing the first cycle (depth-first, in config order) is blamed."""
        found = graph.find_cycle(self._after())
        if found:
            name, index, cycle = found
            raise fail(f"dependency cycle: {' -> '.join(cycle)} (each waits for the next)",
                       "services", name, "after", index)

    def _after(self) -> dict[str, tuple[str, ...]]:
        return {name: svc.after for name, svc in self.services.items()}

    def _check_sharing(self) -> None:
        """Units, ports and (between backends) GPUs are per host: each may be claimed once."""
        units: dict[tuple[str, str], str] = {}
        ports: dict[tuple[str, int], str] = {}
        gpus: dict[tuple[str, int], str] = {}
        for name, svc in self.services.items():
            if svc.job is not None and (owner := units.setdefault((svc.host, f"job {svc.job.name}"), name)) != name:
                raise fail(f"job name {svc.job.name} on cluster '{svc.host}' is already used by service '{owner}'",
                           "services", name, "job", "name")
            at, whose = _config_path(svc), f"{_rank_words(self, name)}: " if svc.follower else ""
            if svc.unit is not None and (owner := units.setdefault((svc.host, svc.unit), name)) != name:
                raise fail(f"{whose}unit {svc.unit} on host '{svc.host}' is already used by {_rank_words(self, owner)}",
                           *at, "unit")
            for key in ("port", "bootstrap_port") if not svc.follower else ("port",):   # the bootstrap is rank 0's
                port = getattr(svc, key)
                if port is not None and (owner := ports.setdefault((svc.host, port), name)) != name:
                    where = f"cluster '{svc.host}' (its jobs may share a node)" if svc.is_job else f"host '{svc.host}'"
                    raise fail(f"{whose}port {port} on {where} is already used by {_rank_words(self, owner)}", *at, key)
            if svc.role not in BACKEND_ROLES:
                continue
            for index, gpu in enumerate(svc.gpus):
                if (owner := gpus.setdefault((svc.host, gpu), name)) != name:
                    raise fail(f"{whose}GPU {gpu} on host '{svc.host}' is already used by {_rank_words(self, owner)}",
                               *at, "gpus", index)

    def levels(self) -> list[list[str]]:
        """Services by bring-up level (see :func:`graph.levels`)."""
        return graph.levels(self._after())

    @cached_property
    def redactor(self) -> Redactor:
        """Masks every secret of the deployment in a text: its launches' (pdtui/config/secrets.py) and its routers'
        API keys, and any value given to a name that says it is a secret (one pdtui was never told); built once."""
        values = [value for svc in self.services.values() if svc.launch is not None
                  for value in svc.launch.secret_values()]
        return Redactor([*values, *(key for svc in self.services.values() if (key := svc.api_key))],
                        SECRET_WORDS)

    @cached_property
    def _routers_of(self) -> dict[str, tuple[ServiceConfig, ...]]:
        routers: dict[str, list[ServiceConfig]] = {}
        for svc in self.services.values():
            if svc.is_router:
                for name in svc.after:
                    routers.setdefault(name, []).append(svc)
        return {name: tuple(found) for name, found in routers.items()}

    def routers_of(self, service: str) -> tuple[ServiceConfig, ...]:
        """The routers that come straight after ``service`` (an index made once: a fleet asks per backend)."""
        return self._routers_of.get(service, ())

    def dependents(self, service: str) -> list[str]:
        """Every service that waits, directly or through others, for ``service`` (see :func:`graph.dependents`)."""
        return graph.dependents(self._after(), self.services[service].server)   # a rank's are its server's

    def backend_url(self, router: ServiceConfig, backend: ServiceConfig) -> str:
        """The URL a router reaches a backend unit at: loopback on its own host, the backend host's address
        elsewhere (a job's is its node's, known once Slurm placed it)."""
        assert not backend.is_job, f"{backend.name}: a job's URL is its node's"
        host = self.hosts[backend.host]
        name = "127.0.0.1" if backend.host == router.host or host.local else (host.address or backend.host)
        return f"http://{name}:{backend.port}"


def _named(section: str, what: str, key: str, entry: Any) -> Any:
    """``entry`` with ``name`` set to ``key``; the name comes from the key only."""
    _check_name_key(section, what, key)
    if isinstance(entry, Mapping):
        if "name" in entry:
            model = SECTION_MODELS[section]
            known = tuple(f for f in model.model_fields if f != "name")
            raise fail(unknown_key((section, key), "name", known), section, key, "name", on="key")
        return {"name": key, **entry}
    if isinstance(entry, (HostConfig, ClusterConfig, ServiceConfig)) and entry.name != key:
        raise fail(f"{what} named '{entry.name}' is filed under '{key}'", section, key, on="key")
    return entry


SECTION_MODELS: dict[str, type[_Model]] = {"hosts": HostConfig, "clusters": ClusterConfig, "services": ServiceConfig}


def job_name(deployment: str, service: str) -> str:
    """A job's default name: the deployment's and the service's, in the characters a job name keeps well."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", deployment).strip("-.") or "pdtui"
    return f"{stem}-{service}"


def _job_names(deployment: Any, services: Mapping[str, Any]) -> dict[str, Any]:
    """Each job named as its deployment and service, unless its job block names it."""
    filled = dict(services)
    for name, entry in services.items():
        if isinstance(entry, Mapping) and "cluster" in entry:
            job = entry.get("job", {})
            if isinstance(job, Mapping) and "name" not in job:
                filled[name] = {**entry, "job": {**job, "name": job_name(str(deployment or ""), name)}}
    return filled


def _check_name_key(section: str, what: str, key: str) -> None:
    try:
        check_name(key, what)
    except PydanticCustomError as exc:
        raise fail(exc.message(), section, key, on="key") from None


def _router_after(services: Mapping[str, Any]) -> dict[str, Any]:
    """A router with no ``after`` waits for every prefill and decode service."""
    def role(entry: Any) -> Any:
        return entry.get("role") if isinstance(entry, Mapping) else getattr(entry, "role", None)

    backends = [name for name, entry in services.items() if role(entry) in BACKEND_ROLES]
    return {
        name: {**entry, "after": backends} if role(entry) == "router" and "after" not in entry else entry
        for name, entry in services.items()
    }



def _with_ranks(services: Mapping[str, ServiceConfig]) -> dict[str, ServiceConfig]:
    """Every service, each server over several nodes followed by its ranks >= 1."""
    return {rank.name: rank for svc in services.values() for rank in (svc, *svc.ranks())}


def _config_path(svc: ServiceConfig) -> tuple[str | int, ...]:
    """Where the config says what ``svc`` is: its entry, or for a rank >= 1 its node in its server's ``hosts``."""
    return ("services", svc.server, "hosts", svc.rank) if svc.follower else ("services", svc.name)


def _rank_words(deployment: Deployment, name: str) -> str:
    """A service as an error names it: ``service 'decode'``, or ``rank 1 of service 'decode'``."""
    svc = deployment.services[name]
    return f"rank {svc.rank} of service '{svc.server}'" if svc.follower else f"service '{name}'"


def dist_port(svc: ServiceConfig) -> int:
    """The rendezvous port of a server over several nodes (``--dist-init-addr``'s, on rank 0's host)."""
    return svc.launch.dist_port if svc.launch is not None and svc.launch.dist_port else DEFAULT_DIST_PORT
