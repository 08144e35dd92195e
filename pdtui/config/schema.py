"""The schema: pydantic models that check types, fill the role defaults and cross-check services."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pdtui.config import graph
from pdtui.config.defaults import (
    BACKEND_ROLES,
    COMMANDS,
    DEFAULT_CANARY,
    DEFAULT_TIMEOUT,
    DEFAULT_UNHEALTHY_AFTER,
    ROLES,
    SGLANG_READY_LINE,
    Role,
)
from pdtui.config.errors import did_you_mean, fail, show, unknown_key
from pdtui.config.fields import (
    Address,
    Bool,
    DeploymentName,
    FilePath,
    HostName,
    LogRegex,
    NumaNode,
    Port,
    Unit,
    UnitDir,
    UserName,
    check_duration,
    check_interval_or_off,
    check_name,
    check_regex,
    check_role,
    gpu_index,
    list_of,
    normalize_unit,
)
from pdtui.config.launch import LaunchSpec, check_launch_keys


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReadySpec(_Model):
    """What must hold for a service to count as ready: every check given."""

    log: LogRegex = None
    http: str | None = None
    tcp: Bool = False

    @field_validator("http", mode="before")
    @classmethod
    def _http_path(cls, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.startswith("/") or not value.isprintable() or " " in value:
            raise fail(f"expected an HTTP path starting with '/', like /health, got {show(value)}")
        return value


class HostConfig(_Model):
    """A machine the deployment runs on, reached over SSH or (``local``) directly."""

    name: str
    address: Address | None = None
    local: Bool = False
    user: UserName | None = None
    port: Port | None = None
    known_hosts: FilePath | None = None
    sudo: Bool = False
    unit_dir: UnitDir = "/etc/systemd/system"    # where `pdtui units --install` writes units
    commands: dict[str, tuple[str, ...]] = Field(default_factory=lambda: _default_commands())

    @field_validator("commands", mode="before")
    @classmethod
    def _commands(cls, value: Any) -> dict[str, tuple[str, ...]]:
        """Fill every command; a string is split like a shell would, a list is taken as argv."""
        if not isinstance(value, Mapping):
            raise fail(f"expected a mapping of {', '.join(COMMANDS)} to commands, got {show(value)}")
        commands = _default_commands()
        for key, argv in value.items():
            if key not in COMMANDS:
                raise fail(
                    f"unknown command '{key}', expected one of {', '.join(COMMANDS)}{did_you_mean(key, COMMANDS)}",
                    key,
                    on="key",
                )
            commands[key] = _argv(key, argv)
        return commands

    @model_validator(mode="after")
    def _address_or_local(self) -> HostConfig:
        if self.local and self.address is not None:
            raise fail(f"host '{self.name}' has both an address and local: true, expected one of them", "local", on="key")
        if not self.local and self.address is None:
            raise fail(f"host '{self.name}' needs an address (or local: true)", on="key")
        return self


def _default_commands() -> dict[str, tuple[str, ...]]:
    """Each command as itself (found on the host's PATH)."""
    return {name: (name,) for name in COMMANDS}


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


def _default_ready(role: str, port: Any) -> dict[str, Any]:
    if role in BACKEND_ROLES:
        return {"log": SGLANG_READY_LINE, "http": "/health", "tcp": False}
    if role == "router":
        return {"log": None, "http": None, "tcp": True}
    return {"log": None, "http": None, "tcp": port is not None}


class ServiceConfig(_Model):
    """One systemd service of the deployment and how to tell it is ready."""

    name: str
    host: HostName
    unit: Unit
    role: Annotated[Role, BeforeValidator(check_role)] = "other"
    gpus: Annotated[tuple[int, ...], BeforeValidator(list_of(gpu_index, "a list of GPU indexes (integers)"))] = ()
    numa: NumaNode | None = None
    port: Port | None = None
    bootstrap_port: Port | None = None            # a prefill's bootstrap server (default: /server_info, else 8998)
    replaces: Annotated[tuple[str, ...], BeforeValidator(list_of(normalize_unit, "a list of unit names"))] = ()
    timeout: Annotated[float, BeforeValidator(check_duration)]
    unhealthy_after: Annotated[float, BeforeValidator(check_duration)] = DEFAULT_UNHEALTHY_AFTER
    canary: Annotated[float | None, BeforeValidator(check_interval_or_off)] = None   # a router's (default 30s)
    ready: ReadySpec
    fail: Annotated[tuple[str, ...], BeforeValidator(list_of(check_regex, "a list of regular expressions"))] = ()
    after: Annotated[
        tuple[str, ...], BeforeValidator(list_of(lambda v: check_name(v, "service"), "a list of service names"))
    ] = ()
    launch: LaunchSpec | None = None

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
        if isinstance(ready, Mapping):
            filled["ready"] = {**_default_ready(role, data.get("port")), **ready}
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

    @property
    def is_router(self) -> bool:
        """The one definition of a router: its role (it comes after the backends it routes to)."""
        return self.role == "router"

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
        if self.bootstrap_port is not None and self.role != "prefill":
            raise fail(f"service '{self.name}' is a {self.role}: only a prefill has a bootstrap_port", "bootstrap_port", on="key")
        if "canary" in self.model_fields_set and not self.is_router:
            raise fail(f"service '{self.name}' is a {self.role}: only a router has a canary (a generation through it "
                       "after ready)", "canary", on="key")
        if self.unit in self.replaces:
            raise fail(f"service '{self.name}' cannot replace its own unit {self.unit}", "replaces", self.replaces.index(self.unit))
        if self.launch is not None:
            check_launch_keys(self.name, self.role, self.launch)
        return self


class Deployment(_Model):
    """The whole deployment: hosts, services, and the order to bring them up in."""

    name: DeploymentName
    hosts: dict[str, HostConfig]
    services: dict[str, ServiceConfig]
    source: str = "<config>"
    strict: Bool = False

    @model_validator(mode="before")
    @classmethod
    def _name_entries(cls, data: Any) -> Any:
        """Give every host and service its key as its name; default a router's ``after``."""
        if not isinstance(data, Mapping):
            return data
        named = dict(data)
        for section, what in (("hosts", "host"), ("services", "service")):
            entries = data.get(section)
            if isinstance(entries, Mapping):
                named[section] = {key: _named(section, what, key, entry) for key, entry in entries.items()}
        if isinstance(named.get("services"), Mapping):
            named["services"] = _router_after(named["services"])
        return named

    @field_validator("hosts", "services", mode="before")
    @classmethod
    def _not_empty(cls, value: Any, info: Any) -> Any:
        what = "host" if info.field_name == "hosts" else "service"
        if not isinstance(value, Mapping) or not value:
            raise fail(f"expected a mapping of {what} names to {what}s (at least one), got {show(value)}")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Deployment:
        for name, service in self.services.items():
            if service.host not in self.hosts:
                raise fail(
                    f"unknown host '{service.host}', expected one of {', '.join(self.hosts)}"
                    f"{did_you_mean(service.host, self.hosts)}",
                    "services", name, "host",
                )
            for index, dep in enumerate(service.after):
                if dep == name:
                    raise fail(f"service '{name}' cannot come after itself", "services", name, "after", index)
                if dep not in self.services:
                    raise fail(
                        f"unknown service '{dep}' in after{did_you_mean(dep, self.services)}",
                        "services", name, "after", index,
                    )
        self._check_cycles()
        self._check_sharing()
        return self

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
            if (owner := units.setdefault((svc.host, svc.unit), name)) != name:
                raise fail(f"unit {svc.unit} on host '{svc.host}' is already used by service '{owner}'", "services", name, "unit")
            for key in ("port", "bootstrap_port"):
                port = getattr(svc, key)
                if port is not None and (owner := ports.setdefault((svc.host, port), name)) != name:
                    raise fail(f"port {port} on host '{svc.host}' is already used by service '{owner}'", "services", name, key)
            if svc.role not in BACKEND_ROLES:
                continue
            for index, gpu in enumerate(svc.gpus):
                if (owner := gpus.setdefault((svc.host, gpu), name)) != name:
                    raise fail(
                        f"GPU {gpu} on host '{svc.host}' is already used by service '{owner}'", "services", name, "gpus", index
                    )

    def levels(self) -> list[list[str]]:
        """Services by bring-up level (see :func:`graph.levels`)."""
        return graph.levels(self._after())

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
        return graph.dependents(self._after(), service)


def _named(section: str, what: str, key: str, entry: Any) -> Any:
    """``entry`` with ``name`` set to ``key``; the name comes from the key only."""
    _check_name_key(section, what, key)
    if isinstance(entry, Mapping):
        if "name" in entry:
            model = HostConfig if section == "hosts" else ServiceConfig
            known = tuple(f for f in model.model_fields if f != "name")
            raise fail(unknown_key((section, key), "name", known), section, key, "name", on="key")
        return {"name": key, **entry}
    if isinstance(entry, (HostConfig, ServiceConfig)) and entry.name != key:
        raise fail(f"{what} named '{entry.name}' is filed under '{key}'", section, key, on="key")
    return entry


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

