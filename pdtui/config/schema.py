"""The schema's core: pydantic models of what every deployment has (its services, their readiness, their order),
that fill the role defaults and cross-check services.

The places services run on, and the keys that place a service there, are the kinds' (pdtui/config/placement.py):
a config is validated against the core's models composed with every registered kind's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Self, TypeVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict, SkipJsonSchema
from pydantic_core import PydanticCustomError

from pdtui.config import graph
from pdtui.config.defaults import (
    BACKEND_ROLES,
    DEFAULT_CANARY,
    DEFAULT_DIST_PORT,
    DEFAULT_ENGINE,
    DEFAULT_TIMEOUT,
    DEFAULT_UNHEALTHY_AFTER,
    ENGINES,
    READY_LINES,
    ROLES,
    Role,
)
from pdtui.config.errors import NodePath, did_you_mean, fail, show, show_key
from pdtui.config.fields import (
    DURATION,
    ENV_NAME,
    INTERVAL_OR_OFF,
    NAME_PATTERN,
    REGEX,
    Bool,
    DeploymentName,
    Duration,
    Engine,
    GpuIndexes,
    HostName,
    LogRegex,
    NumaNode,
    Port,
    check_name,
    check_role,
    config_name,
    listed,
)
from pdtui.config.launch import LaunchSpec, check_launch_keys
from pdtui.config.places import Place, Reached
from pdtui.config.secrets import SECRET_WORDS
from pdtui.config.yamlpos import Positions
from pdtui.support.redact import Redactor
from pdtui.support.text import inert

if TYPE_CHECKING:
    from pdtui.config.placement import PlacementKind, Placements

RANK_MARK = "@"     # a server's rank >= 1 is the service SERVER@RANK (no name the config gives has one)
P = TypeVar("P", bound=Place)
S = TypeVar("S", bound="ServiceConfig")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def no_default(schema: JsonDict) -> None:
    """For editors: no ``default`` where the model's is no value the file may give (pdtui decides: a stall window, a
    canary interval; or none at all), lest an editor offer it."""
    schema.pop("default", None)


def required_one_of(*keys: str, filled: tuple[str, ...] = ()) -> Callable[[JsonDict], None]:
    """A model's JSON Schema edited to say what its file requires: one of ``keys`` (each model requires none of
    them), and not ``filled``, which the model requires but the loader fills when the file leaves them out."""
    def edit(schema: JsonDict) -> None:
        required = schema.pop("required", [])
        kept = [key for key in required if key not in filled] if isinstance(required, list) else []
        schema.update({"required": kept} if kept else {})
        schema["anyOf"] = [{"required": [key]} for key in keys]
    return edit


def user_keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The keys a file may give a model: its fields but those pdtui fills (a name from its key, the source)."""
    skipped = cast(type, SkipJsonSchema)
    return tuple(key for key, field in model.model_fields.items()
                 if not any(isinstance(mark, skipped) for mark in field.metadata))


def named_entries(what: str) -> BeforeValidator:
    """A section of named entries (services, a kind's places): a mapping with one entry at least."""
    def check(value: Any) -> Any:
        if not isinstance(value, Mapping) or not value:
            raise fail(f"expected a mapping of {what} names to {what}s (at least one), got {show(value)}")
        return value
    return BeforeValidator(check)


@dataclass(frozen=True, slots=True)
class Claim:
    """What a service holds of its place that no other service may: ``key`` on its place, ``said`` in an error's
    words (``unit a.service on host 'gpu0'``), ``at`` the config's path of it."""

    key: str
    said: str
    at: NodePath


class ReadySpec(_Model):
    """What must hold for a service to count as ready: every check given."""

    EXPECTED: ClassVar[str] = "a mapping of readiness checks (log, http, tcp)"

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


def _default_ready(role: str, port: Any, engine: str) -> dict[str, Any]:
    if role in BACKEND_ROLES:
        return {"log": READY_LINES[engine], "http": "/health", "tcp": False}
    if role == "router":
        return {"log": None, "http": None, "tcp": True}
    return {"log": None, "http": None, "tcp": port is not None}



class ServiceConfig(_Model):
    """One service of the deployment, on a place of one of the config's kinds, and how to tell it is ready.

    These are the keys every service has; the kind of place it is on adds its own (a subclass of this model, see
    pdtui/config/placement.py), and :meth:`settings` reads a service as its kind's model.
    """

    placements: ClassVar[Placements]   # the kinds of the composed model (pdtui/config/placement.py)
    EXPECTED: ClassVar[str]

    name: SkipJsonSchema[str]    # its key in the file
    host: HostName               # the place its commands run on: its kind fills it from the key that places it
    role: Annotated[Role, BeforeValidator(check_role)] = "other"
    engine: Engine = DEFAULT_ENGINE   # what it runs (a router: whose router)
    gpus: GpuIndexes = ()
    numa: NumaNode | None = None
    port: Port | None = None
    bootstrap_port: Port | None = None            # a prefill's bootstrap server (default: /server_info, else 8998)
    timeout: Duration
    unhealthy_after: Duration = DEFAULT_UNHEALTHY_AFTER
    # No line this long in a start-up phase known to hang: a warning, and a timeout names where it stopped.
    # Default: timeout / 4, >= 1m, <= timeout / 2.
    stall_after: Annotated[float | None, DURATION] = Field(None, json_schema_extra=no_default)
    canary: Annotated[float | None, INTERVAL_OR_OFF] = Field(None, json_schema_extra=no_default)   # a router's (30s)
    api_key_env: Annotated[str | None, ENV_NAME] = Field(None, json_schema_extra=no_default)   # a router's API key
    ready: ReadySpec
    fail: Annotated[tuple[str, ...], listed(REGEX, "a list of regular expressions")] = ()
    after: Annotated[tuple[str, ...], listed(config_name("service"), "a list of service names")] = ()
    launch: LaunchSpec | None = None

    _rank: int = PrivateAttr(default=0)
    _placement: PlacementKind | None = PrivateAttr(default=None)

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

    @model_validator(mode="wrap")
    @classmethod
    def _placed(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """Placed on the kind whose keys it gives, which fills its place; then it gives what that kind requires
        and no other kind's settings."""
        kind = cls.placements.kind_of(data) if isinstance(data, Mapping) else None
        svc = handler(kind.fill(data) if kind is not None else data)
        if kind is not None:
            svc._placement = kind
            svc._check_placement(kind)
        return svc

    def _check_placement(self, kind: PlacementKind) -> None:
        """It gives what ``kind`` requires of a service on it, and no other kind's setting (worded by ``kind``,
        else by the setting's kind, else here)."""
        for key in kind.required:
            if getattr(self, key) is None:
                raise fail(f"service '{self.name}' is missing required key '{key}'", on="key")
        foreign = [(other, key) for other in self.placements.kinds if other is not kind
                   for key in other.settings if getattr(self, key) not in (None, ())]
        if foreign:
            other, key = foreign[0]
            raise (kind.refuse(self, key) or other.stray(self, key, kind)
                   or fail(f"service '{self.name}' is on {kind.where(self)}: {key} is a setting of a service on a "
                           f"{other.what}", key, on="key"))

    @property
    def placement(self) -> PlacementKind:
        """The kind of place it is on."""
        assert self._placement is not None, f"{self.name}: not validated against a config's kinds"
        return self._placement

    def settings(self, model: type[S]) -> S:
        """It as ``model`` reads it: the model of its kind's keys (``cfg.settings(UnitService).unit``)."""
        assert isinstance(self, model), f"{self.name}: no {model.__name__}"
        return self

    @property
    def rank(self) -> int:
        """Its node's rank in a server over several nodes (``nnodes``): 0 for the server itself (and for a server
        of one node), 1 and up for the ranks the deployment adds after it, named ``SERVER@RANK``."""
        return self._rank

    @property
    def nnodes(self) -> int:
        """How many nodes its server spans: one, unless its kind places it on several."""
        return 1

    def ranks(self) -> tuple[ServiceConfig, ...]:
        """Its ranks >= 1, each a service of its own on its node (rank 0 is this one): none, unless its kind
        places it on several nodes."""
        return ()

    def config_path(self) -> NodePath:
        """Where the config says what it is: its entry (a rank >= 1: where its kind says its node)."""
        return ("services", self.name)

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
        """How many GPUs it runs on: its own, unless its kind asks for them elsewhere."""
        return len(self.gpus)

    @property
    def scheduled(self) -> bool:
        """Whether a scheduler picks its node when it starts (so its address is not known before)."""
        return self.placement.scheduled

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
        if self.engine != "sglang" and self.bootstrap_port is not None:
            raise fail(f"service '{self.name}' runs {self.engine}: a bootstrap server is SGLang's here (a vLLM prefill "
                       "is found through its NIXL side channel, and pdtui brings up a vLLM server on one node)",
                       "bootstrap_port", on="key")
        if self.bootstrap_port is not None and self.role != "prefill":
            raise fail(f"service '{self.name}' is a {self.role}: only a prefill has a bootstrap_port", "bootstrap_port", on="key")
        if "canary" in self.model_fields_set and not self.is_router:
            raise fail(f"service '{self.name}' is a {self.role}: only a router has a canary (a generation through it "
                       "after ready)", "canary", on="key")
        if self.api_key_env is not None:
            self._check_api_key_env(self.api_key_env)
        if self.launch is not None:
            check_launch_keys(self.name, self.role, self.launch, nnodes=self.nnodes, engine=self.engine)
        return self

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


NAMED: JsonDict = {"propertyNames": {"pattern": NAME_PATTERN}, "minProperties": 1}
"""For editors: a section of named entries (services, a kind's places), at least one, each key a name."""


class Deployment(_Model):
    """The whole deployment: the places its services run on, the services, and the order to bring them up in.

    The core's keys; every kind of place adds its section (``hosts:``), see pdtui/config/placement.py.
    """

    placements: ClassVar[Placements]   # the kinds of the composed model

    name: DeploymentName
    services: Annotated[dict[str, ServiceConfig], named_entries("service")] = Field(json_schema_extra=NAMED)
    source: SkipJsonSchema[str] = "<config>"   # where it was read from: the loader's, never the file's
    strict: Bool = False
    engine: Engine = DEFAULT_ENGINE   # every service's, unless it says its own
    _positions: Positions | None = PrivateAttr(default=None)     # where each key and value was read (from a file)

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        """``obj`` as a deployment of the registered kinds when the core's model is asked (it has no section of a
        kind's places of its own)."""
        if cls is Deployment:
            from pdtui.config.placement import registered
            return cast(Self, registered().deployment.model_validate(obj, **options))
        return super().model_validate(obj, **options)

    def where(self, *path: str | int, on: str = "value") -> str:
        """``FILE:LINE:COL`` of a key or value of the config (its nearest written ancestor's), as an error line
        begins; the source alone for a deployment not read from YAML."""
        if self._positions is None:
            return inert(self.source)
        line, col = self._positions.find(path, on)
        return f"{inert(self.source)}:{line}:{col}"

    def places(self, model: type[P]) -> dict[str, P]:
        """The places of the kind whose places are ``model``s (its section), as that model."""
        return cast(dict[str, P], getattr(self, self.placements.section_of(model)))

    def place(self, name: str) -> Place | None:
        """The place ``name`` names, of whichever kind."""
        return next((places[name] for places in self._sections().values() if name in places), None)

    def address_of(self, place: str) -> str:
        """The address others reach ``place`` at: a machine's (loopback when it is this one), else its name."""
        found = self.place(place)
        return found.reached_at if isinstance(found, Reached) else place

    def _sections(self) -> dict[str, dict[str, Place]]:
        return {section: getattr(self, section) for section in self.placements.sections}

    @model_validator(mode="before")
    @classmethod
    def _name_entries(cls, data: Any) -> Any:
        """Give every place and service its key as its name, and each service what its kind fills from the
        deployment; default a router's ``after``."""
        if not isinstance(data, Mapping):
            return data
        kinds = cls.placements
        named = dict(data)
        for section, what in (*((kind.section, kind.what) for kind in kinds.kinds), ("services", "service")):
            entries = data.get(section)
            if isinstance(entries, Mapping):
                named[section] = {key: cls._named(section, what, key, entry) for key, entry in entries.items()}
        if isinstance(named.get("services"), Mapping):
            named["services"] = _prepared(kinds, data.get("name"), _router_after(named["services"]))
            if data.get("engine") in ENGINES:       # else its own error, at its own key
                named["services"] = {key: {"engine": data["engine"], **entry} if isinstance(entry, Mapping) else entry
                                     for key, entry in named["services"].items()}
        if not any(section in data for section in kinds.sections):
            first, *rest = kinds.kinds
            others = ", or ".join(f"'{kind.section}', {kind.needed_for}" for kind in rest)
            raise fail(f"the top level is missing required key '{first.section}'" + (f" (or {others})" if rest else ""),
                       on="key")
        return named

    @classmethod
    def _named(cls, section: str, what: str, key: str, entry: Any) -> Any:
        """``entry`` with ``name`` set to ``key``; the name comes from the key only."""
        _check_name_key(section, what, key)
        if isinstance(entry, Mapping):
            if "name" in entry:
                kind = cls.placements.sections.get(section)
                known = user_keys(kind.place if kind is not None else cls.placements.service)
                raise fail(cls.placements.wording.unknown_key((section, key), "name", known), section, key, "name",
                           on="key")
            return {"name": key, **entry}
        if isinstance(entry, (Place, ServiceConfig)) and entry.name != key:
            raise fail(f"{what} named '{entry.name}' is filed under '{key}'", section, key, on="key")
        return entry

    @model_validator(mode="after")
    def _cross_checks(self) -> Deployment:
        self._check_services()
        wide = self.model_copy(update={"services": _with_ranks(self.services)})
        wide._check_sharing()
        for kind in self.placements.kinds:
            kind.check_deployment(wide)
        return wide

    def _check_services(self) -> None:
        sections = [(kind, getattr(self, kind.section)) for kind in self.placements.kinds]
        for index, (kind, places) in enumerate(sections):
            for later, theirs in sections[index + 1:]:
                for name in places.keys() & theirs.keys():
                    raise fail(f"'{name}' names both a {kind.what} and a {later.what}, expected names of their own",
                               later.section, name, on="key")
        for name, service in self.services.items():
            service.placement.check_service(self, name, service)
            for index, dep in enumerate(service.after):
                if dep == name:
                    raise fail(f"service '{name}' cannot come after itself", "services", name, "after", index)
                if dep not in self.services:
                    raise fail(
                        f"unknown service {show_key(dep)} in after{did_you_mean(dep, self.services)}",
                        "services", name, "after", index,
                    )
        self._check_cycles()

    def dist_addr(self, svc: ServiceConfig) -> str:
        """Where a server over several nodes meets (``--dist-init-addr``): its launch's ``dist_addr``, else rank 0's
        place's address (loopback when it is this machine)."""
        rank0 = self.services[svc.server]
        given = rank0.launch.dist_addr if rank0.launch is not None else None
        return f"{given or self.address_of(rank0.host)}:{dist_port(rank0)}"

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
        """What a service holds of its place (its kind's claims, its ports and, between backends, its GPUs) is
        per place: each may be claimed once."""
        claims: dict[tuple[str, str], str] = {}
        ports: dict[tuple[str, int], str] = {}
        gpus: dict[tuple[str, int], str] = {}
        for name, svc in self.services.items():
            whose = f"{rank_words(self, name)}: " if svc.follower else ""
            for claim in svc.placement.claims(svc):
                if (owner := claims.setdefault((svc.host, claim.key), name)) != name:
                    raise fail(f"{whose}{claim.said} is already used by {rank_words(self, owner)}", *claim.at)
            at, where = svc.config_path(), svc.placement.where(svc)
            for key in ("port", "bootstrap_port") if not svc.follower else ("port",):   # the bootstrap is rank 0's
                port = getattr(svc, key)
                if port is not None and (owner := ports.setdefault((svc.host, port), name)) != name:
                    raise fail(f"{whose}port {port} on {where} is already used by {rank_words(self, owner)}", *at, key)
            if svc.role not in BACKEND_ROLES:
                continue
            for index, gpu in enumerate(svc.gpus):
                if (owner := gpus.setdefault((svc.host, gpu), name)) != name:
                    raise fail(f"{whose}GPU {gpu} on {where} is already used by {rank_words(self, owner)}",
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
        """The URL a router reaches a backend at: loopback on its own place, the backend place's address
        elsewhere (a scheduled service's is its node's, known once it was placed)."""
        assert not backend.scheduled, f"{backend.name}: a scheduled service's URL is its node's"
        name = "127.0.0.1" if backend.host == router.host else self.address_of(backend.host)
        return f"http://{name}:{backend.port}"


def _prepared(kinds: Placements, deployment: Any, services: Mapping[str, Any]) -> dict[str, Any]:
    """Each service's entry with what its kind fills from the deployment around it."""
    prepared = dict(services)
    for name, entry in services.items():
        kind = kinds.kind_of(entry, strict=False) if isinstance(entry, Mapping) else None
        if kind is not None:
            prepared[name] = kind.prepare(deployment, name, entry)
    return prepared


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


def rank_words(deployment: Deployment, name: str) -> str:
    """A service as an error names it: ``service 'decode'``, or ``rank 1 of service 'decode'``."""
    svc = deployment.services[name]
    return f"rank {svc.rank} of service '{svc.server}'" if svc.follower else f"service '{name}'"


def dist_port(svc: ServiceConfig) -> int:
    """The rendezvous port of a server over several nodes (``--dist-init-addr``, on rank 0's host)."""
    return svc.launch.dist_port if svc.launch is not None and svc.launch.dist_port else DEFAULT_DIST_PORT
