"""The deployment config: YAML in, a typed and validated :class:`Deployment` out.

Two layers. The YAML layer composes the file into PyYAML *nodes* (not Python
objects) so that the start of every key and every value is known by its path,
and so that duplicate keys, which PyYAML would silently collapse, are caught.
The schema layer is pydantic: it checks types, fills the role defaults and
cross-checks services against each other. Every failure of either layer becomes
one :class:`ConfigError` line, ``FILE:LINE:COL: what was expected``, pointing at
the key (for an unknown key) or the value (for a wrong value) to blame.

Validators raise errors through :func:`_fail`, which carries the path of the
offending node relative to where pydantic reports the error, so a check made on
the whole deployment (a port used twice) can still point at the exact entry.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "ConfigError",
    "Deployment",
    "HostConfig",
    "ReadySpec",
    "Role",
    "ServiceConfig",
    "load_config",
    "parse_config",
    "parse_duration",
]

Role = Literal["prefill", "decode", "router", "other"]
ROLES: tuple[str, ...] = get_args(Role)
COMMANDS: tuple[str, ...] = ("systemctl", "journalctl", "nvidia-smi")
BACKEND_ROLES = frozenset({"prefill", "decode"})

DEFAULT_TIMEOUT: dict[str, float] = {"prefill": 360.0, "decode": 360.0, "router": 120.0, "other": 300.0}
DEFAULT_UNHEALTHY_AFTER = 60.0   # after ready, health failing this long (and 3 checks in a row) fails a service
DEFAULT_BOOTSTRAP_PORT = 8998    # SGLang's --disaggregation-bootstrap-port default
SGLANG_READY_LINE = "fired up and ready"

MAX_FILE_BYTES = 1 << 20      # a config is a page or two; anything bigger is the wrong file
MAX_NODES = 100_000           # aliases can expand a small file exponentially ("billion laughs")

NodePath = tuple[str | int, ...]


class ConfigError(Exception):
    """A config that cannot be used, as one line the user can act on."""

    def __init__(self, source: str, line: int, col: int, message: str) -> None:
        self.source = source
        self.line = line
        self.col = col
        self.message = " ".join(message.splitlines())
        super().__init__(f"{source}:{line}:{col}: {self.message}")


# --------------------------------------------------------------------------- durations

DURATION_EXPECTED = "a duration like 90s, 6m, 1h or a number of seconds"
_NUMBER = r"\d+(?:\.\d+)?"
_DURATION = re.compile(rf"(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m)?(?:(?P<s>{_NUMBER})s)?")


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``"90s"``, ``"6m"``, ``"1h"``, ``"1h30m"``, ``45`` or ``2.5``.

    Raises ValueError (with a message fit for the user) for anything else,
    including negative, infinite and boolean values.
    """
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(_NUMBER, text):
            seconds = float(text)
        elif text and (match := _DURATION.fullmatch(text)):
            h, m, s = (float(match[unit] or 0) for unit in "hms")
            seconds = h * 3600 + m * 60 + s
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected {DURATION_EXPECTED}, got {_show(value)}")
    return seconds


# --------------------------------------------------------------------------- messages

def _show(value: Any) -> str:
    """A value as the user wrote it, on one line and short."""
    if value is None:
        return "nothing"
    if isinstance(value, Mapping):
        return "a mapping" if value else "an empty mapping"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "a list" if value else "an empty list"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    text = " ".join(text.splitlines())
    return text if len(text) <= 60 else text[:57] + "..."


def _did_you_mean(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else ``""``."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _describe(path: NodePath) -> str:
    """Where a mapping sits, in the words of an error message."""
    if not path:
        return "the top level"
    if len(path) == 2 and path[0] == "hosts":
        return f"host '{path[1]}'"
    if len(path) == 2 and path[0] == "services":
        return f"service '{path[1]}'"
    if len(path) == 3 and path[0] == "hosts":
        return f"'{path[2]}' of host '{path[1]}'"
    if len(path) == 3 and path[0] == "services":
        return f"'{path[2]}' of service '{path[1]}'"
    return "'" + ".".join(str(part) for part in path) + "'"


def _unknown_key(parent: NodePath, key: str, known: Iterable[str]) -> str:
    return f"unknown key '{key}' in {_describe(parent)}{_did_you_mean(key, known)}"


def _fail(message: str, *at: str | int, on: str = "value") -> PydanticCustomError:
    """An error for pydantic to carry; ``at`` is the offending node below the
    validated object, ``on`` says whether to point at its key or its value."""
    return PydanticCustomError("pdtui", "{message}", {"message": message, "at": at, "on": on})


# --------------------------------------------------------------------------- YAML layer

@dataclass
class _Positions:
    """Start marks of every key and value in the document, by path."""

    keys: dict[NodePath, yaml.Mark] = field(default_factory=dict)
    values: dict[NodePath, yaml.Mark] = field(default_factory=dict)

    def find(self, path: NodePath, on: str = "value") -> tuple[int, int]:
        """1-based line and column for ``path``, else for its nearest written ancestor."""
        mark = self.keys.get(path) if on == "key" else None
        mark = mark or self.values.get(path)
        while mark is None and path:
            path = path[:-1]
            mark = self.keys.get(path) or self.values.get(path)
        return (mark.line + 1, mark.column + 1) if mark else (1, 1)


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Walker:
    """Turns composed nodes into plain data, recording positions as it goes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.positions = _Positions()
        self._scalars = yaml.constructor.SafeConstructor()
        self._open: set[int] = set()
        self._budget = MAX_NODES

    def error(self, mark: yaml.Mark | None, message: str) -> ConfigError:
        return _error_at(self.source, mark, message)

    def walk(self, node: yaml.Node, path: NodePath) -> Any:
        self.positions.values[path] = node.start_mark
        self._budget -= 1
        if self._budget < 0:
            raise self.error(node.start_mark, "too many nodes (aliases expanding?), expected a config of a sane size")
        if id(node) in self._open:
            raise self.error(node.start_mark, "recursive alias, expected a tree of mappings and lists")
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise self.error(node.start_mark, f"unsupported YAML tag '{node.tag}', expected a plain mapping or list")
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self.walk(child, path + (i,)) for i, child in enumerate(node.value)]
        finally:
            self._open.discard(id(node))

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            return self._scalars.construct_object(node)
        except yaml.MarkedYAMLError as exc:
            raise self.error(exc.problem_mark or node.start_mark, _yaml_problem(exc)) from None

    def _mapping(self, node: yaml.MappingNode, path: NodePath) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                for source in reversed(self._merge_sources(value_node)):   # the first one wins
                    merged.update(self.walk(source, path))
        self.positions.values[path] = node.start_mark
        data = dict(merged)
        first_seen: dict[str, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(key_node.start_mark, f"expected a plain key in {_describe(path)}, got a complex key")
            key = key_node.value
            if key in first_seen:
                raise self.error(
                    key_node.start_mark,
                    f"duplicate key '{key}' in {_describe(path)} (first at line {first_seen[key].line + 1})",
                )
            first_seen[key] = key_node.start_mark
            self.positions.keys[path + (key,)] = key_node.start_mark
            data[key] = self.walk(value_node, path + (key,))
        return data

    def _merge_sources(self, node: yaml.Node) -> list[yaml.MappingNode]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise self.error(source.start_mark, "expected a mapping (or a list of mappings) to merge with '<<'")
        return sources


def _error_at(source: str, mark: yaml.Mark | None, message: str) -> ConfigError:
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    return ConfigError(source, line, col, message)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's context and problem as one sentence."""
    kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
    words = ", ".join(part for part in (exc.context, exc.problem or "invalid YAML") if part)
    hint = " (indent with spaces, not tabs)" if "'\\t'" in words else ""
    return f"{kind}: {words}{hint}"


def _compose(text: str, source: str) -> yaml.Node | None:
    """The document's root node, or None for an empty document."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise _error_at(source, exc.problem_mark or exc.context_mark, _yaml_problem(exc)) from None
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        line, col = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
        raise ConfigError(source, line, col, f"unacceptable character #x{exc.character:04x}, expected printable text") from None
    except RecursionError:
        raise ConfigError(source, 1, 1, "nested too deeply, expected a config of a sane shape") from None


# --------------------------------------------------------------------------- field types

def _check_text(value: Any, expected: str) -> str:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise _fail(f"expected {expected}, got {_show(value)}")
    return value


def _check_ssh_word(value: Any, expected: str) -> str:
    """Host names and users go on an ssh command line: no spaces, no option lookalikes."""
    text = _check_text(value, expected)
    if text.startswith("-") or any(ch.isspace() for ch in text):
        raise _fail(f"expected {expected} (no spaces, not starting with '-'), got {_show(value)}")
    return text


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise _fail(f"expected a {what} name (letters, digits, '_', '.', '-'), got {_show(value)}")
    return value


def _check_int(value: Any, expected: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise _fail(f"expected {expected}, got {_show(value)}")
    return value


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(f"expected true or false, got {_show(value)}")
    return value


def _check_role(value: Any) -> str:
    if value not in ROLES:
        raise _fail(f"expected a role: one of {', '.join(ROLES)}, got {_show(value)}{_did_you_mean(value, ROLES)}")
    return value


def _check_regex(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(f"expected a regular expression (a string), got {_show(value)}")
    try:
        re.compile(value)
    except (re.error, OverflowError, RecursionError) as exc:   # the last two: absurd repeats, deep nesting
        raise _fail(f"expected a valid regular expression, got {_show(value)}: {exc}") from None
    return value


_UNIT_CHARS = re.compile(r"[A-Za-z0-9:_.\\@-]+")
_UNIT_TYPES = frozenset(
    {"service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"}
)


def normalize_unit(value: Any) -> str:
    """A systemd service unit name, with ``.service`` appended when no suffix is given.

    Unit names go on command lines (over SSH, through a shell): only systemd's
    own character set is let through.
    """
    if not isinstance(value, str) or not value:
        raise _fail(f"expected a systemd unit name, got {_show(value)}")
    if not _UNIT_CHARS.fullmatch(value) or value.startswith("-"):
        raise _fail(
            f"expected a systemd unit name (letters, digits and : _ . \\ @ - only, not starting with '-'), "
            f"got {_show(value)}"
        )
    suffix = value.rpartition(".")[2]
    if "." in value and suffix in _UNIT_TYPES and suffix != "service":
        raise _fail(f"expected a .service unit, got {_show(value)}")
    unit = value if value.endswith(".service") else value + ".service"
    stem = unit.removesuffix(".service")
    if not stem or stem.startswith("@") or stem.endswith("@"):
        raise _fail(f"expected a unit name (a template needs an instance, like name@1), got {_show(value)}")
    if len(unit) > 255:
        raise _fail(f"expected a unit name of at most 255 characters, got {len(unit)}")
    return unit


def _check_duration(value: Any) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if seconds == 0:
        raise _fail(f"expected a duration greater than zero, got {_show(value)}")
    return seconds


def _list_of(check: Any, expected: str) -> Any:
    """A YAML list checked item by item, pointing at the bad item."""

    def validate(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            raise _fail(f"expected {expected}, got {_show(value)}")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(check(item))
            except PydanticCustomError as exc:
                raise _fail(exc.message(), index) from None
        return tuple(items)

    return validate


def _gpu(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"expected a list of GPU indexes (integers), got {_show(value)}")
    return _check_int(value, "a GPU index (an integer >= 0)", 0)


Port = Annotated[int, BeforeValidator(lambda v: _check_int(v, "a port number (1-65535)", 1, 65535))]
Address = Annotated[str, BeforeValidator(lambda v: _check_ssh_word(v, "a host name or IP address"))]
UserName = Annotated[str, BeforeValidator(lambda v: _check_ssh_word(v, "a user name"))]
FilePath = Annotated[str, BeforeValidator(lambda v: _check_text(v, "a path to a known_hosts file"))]
HostName = Annotated[str, BeforeValidator(lambda v: _check_text(v, "a host name"))]
DeploymentName = Annotated[str, BeforeValidator(lambda v: _check_text(v, "a deployment name (a string)"))]
NumaNode = Annotated[int, BeforeValidator(lambda v: _check_int(v, "a NUMA node number (an integer >= 0)", 0))]
LogRegex = Annotated[str | None, BeforeValidator(lambda v: None if v is None else _check_regex(v))]
Bool = Annotated[bool, BeforeValidator(_check_bool)]
Unit = Annotated[str, BeforeValidator(normalize_unit)]


# --------------------------------------------------------------------------- schema

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
            raise _fail(f"expected an HTTP path starting with '/', like /health, got {_show(value)}")
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
    commands: dict[str, tuple[str, ...]] = Field(default_factory=lambda: {name: (name,) for name in COMMANDS})

    @field_validator("commands", mode="before")
    @classmethod
    def _commands(cls, value: Any) -> dict[str, tuple[str, ...]]:
        """Fill every command; a string is split like a shell would, a list is taken as argv."""
        if not isinstance(value, Mapping):
            raise _fail(f"expected a mapping of {', '.join(COMMANDS)} to commands, got {_show(value)}")
        commands = {name: (name,) for name in COMMANDS}
        for key, argv in value.items():
            if key not in COMMANDS:
                raise _fail(
                    f"unknown command '{key}', expected one of {', '.join(COMMANDS)}{_did_you_mean(key, COMMANDS)}",
                    key,
                    on="key",
                )
            commands[key] = _argv(key, argv)
        return commands

    @model_validator(mode="after")
    def _address_or_local(self) -> HostConfig:
        if self.local and self.address is not None:
            raise _fail(f"host '{self.name}' has both an address and local: true, expected one of them", "local", on="key")
        if not self.local and self.address is None:
            raise _fail(f"host '{self.name}' needs an address (or local: true)", on="key")
        return self


def _argv(command: str, value: Any) -> tuple[str, ...]:
    expected = f"a command for {command}: a string or a non-empty list of strings"
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise _fail(f"expected {expected}, got {_show(value)} ({exc})", command) from None
    elif isinstance(value, (list, tuple)):
        for index, word in enumerate(value):
            if not isinstance(word, str) or not word:
                raise _fail(f"expected {expected}, got {_show(word)}", command, index)
        argv = list(value)
    else:
        raise _fail(f"expected {expected}, got {_show(value)}", command)
    if not argv:
        raise _fail(f"expected {expected}, got an empty command", command)
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
    role: Annotated[Role, BeforeValidator(_check_role)] = "other"
    gpus: Annotated[tuple[int, ...], BeforeValidator(_list_of(_gpu, "a list of GPU indexes (integers)"))] = ()
    numa: NumaNode | None = None
    port: Port | None = None
    bootstrap_port: Port | None = None            # a prefill's bootstrap server (default: /server_info, else 8998)
    replaces: Annotated[tuple[str, ...], BeforeValidator(_list_of(normalize_unit, "a list of unit names"))] = ()
    timeout: Annotated[float, BeforeValidator(_check_duration)]
    unhealthy_after: Annotated[float, BeforeValidator(_check_duration)] = DEFAULT_UNHEALTHY_AFTER
    ready: ReadySpec
    fail: Annotated[tuple[str, ...], BeforeValidator(_list_of(_check_regex, "a list of regular expressions"))] = ()
    after: Annotated[
        tuple[str, ...], BeforeValidator(_list_of(lambda v: _check_name(v, "service"), "a list of service names"))
    ] = ()

    @model_validator(mode="before")
    @classmethod
    def _role_defaults(cls, data: Any) -> Any:
        """Fill the timeout and readiness checks the role implies; a given ``ready``
        mapping overrides the role's checks key by key."""
        if not isinstance(data, Mapping):
            return data
        role = data.get("role", "other")
        role = role if role in ROLES else "other"
        filled = dict(data)
        filled.setdefault("timeout", DEFAULT_TIMEOUT[role])
        ready = data.get("ready", {})
        if isinstance(ready, Mapping):
            filled["ready"] = {**_default_ready(role, data.get("port")), **ready}
        return filled

    @model_validator(mode="after")
    def _consistent(self) -> ServiceConfig:
        if self.role == "router" and self.port is None:
            raise _fail(f"router service '{self.name}' needs a port", on="key")
        for check in ("http", "tcp"):
            if getattr(self.ready, check) and self.port is None:
                raise _fail(f"service '{self.name}' checks readiness over {check} but has no port", "ready", check, on="key")
        for index, gpu in enumerate(self.gpus):
            if gpu in self.gpus[:index]:
                raise _fail(f"GPU {gpu} is listed twice in service '{self.name}'", "gpus", index)
        if self.bootstrap_port is not None and self.role != "prefill":
            raise _fail(f"service '{self.name}' is a {self.role}: only a prefill has a bootstrap_port", "bootstrap_port", on="key")
        if self.unit in self.replaces:
            raise _fail(f"service '{self.name}' cannot replace its own unit {self.unit}", "replaces", self.replaces.index(self.unit))
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
            raise _fail(f"expected a mapping of {what} names to {what}s (at least one), got {_show(value)}")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Deployment:
        for name, service in self.services.items():
            if service.host not in self.hosts:
                raise _fail(
                    f"unknown host '{service.host}', expected one of {', '.join(self.hosts)}"
                    f"{_did_you_mean(service.host, self.hosts)}",
                    "services", name, "host",
                )
            for index, dep in enumerate(service.after):
                if dep == name:
                    raise _fail(f"service '{name}' cannot come after itself", "services", name, "after", index)
                if dep not in self.services:
                    raise _fail(
                        f"unknown service '{dep}' in after{_did_you_mean(dep, self.services)}",
                        "services", name, "after", index,
                    )
        self._check_cycles()
        self._check_sharing()
        return self

    def _check_cycles(self) -> None:
        """Depth-first search in config order; the entry closing a cycle is blamed."""
        done: set[str] = set()
        stack: list[str] = []

        def visit(name: str) -> None:
            stack.append(name)
            for index, dep in enumerate(self.services[name].after):
                if dep in stack:
                    cycle = stack[stack.index(dep):] + [dep]
                    raise _fail(
                        f"dependency cycle: {' -> '.join(cycle)} (each waits for the next)",
                        "services", name, "after", index,
                    )
                if dep not in done:
                    visit(dep)
            stack.pop()
            done.add(name)

        for name in self.services:
            if name not in done:
                visit(name)

    def _check_sharing(self) -> None:
        """Units, ports and (between backends) GPUs are per host: each may be claimed once."""
        units: dict[tuple[str, str], str] = {}
        ports: dict[tuple[str, int], str] = {}
        gpus: dict[tuple[str, int], str] = {}
        for name, svc in self.services.items():
            if (owner := units.setdefault((svc.host, svc.unit), name)) != name:
                raise _fail(f"unit {svc.unit} on host '{svc.host}' is already used by service '{owner}'", "services", name, "unit")
            for key in ("port", "bootstrap_port"):
                port = getattr(svc, key)
                if port is not None and (owner := ports.setdefault((svc.host, port), name)) != name:
                    raise _fail(f"port {port} on host '{svc.host}' is already used by service '{owner}'", "services", name, key)
            if svc.role not in BACKEND_ROLES:
                continue
            for index, gpu in enumerate(svc.gpus):
                if (owner := gpus.setdefault((svc.host, gpu), name)) != name:
                    raise _fail(
                        f"GPU {gpu} on host '{svc.host}' is already used by service '{owner}'", "services", name, "gpus", index
                    )

    def levels(self) -> list[list[str]]:
        """Services grouped by how many ``after`` hops precede them: level 0 starts
        first, each later level once the ones before it are ready. Config order within."""
        depth: dict[str, int] = {}

        def level_of(name: str) -> int:
            if name not in depth:
                depth[name] = 1 + max((level_of(dep) for dep in self.services[name].after), default=-1)
            return depth[name]

        levels: list[list[str]] = []
        for name in self.services:
            level = level_of(name)
            levels.extend([] for _ in range(level + 1 - len(levels)))
            levels[level].append(name)
        return levels

    def dependents(self, service: str) -> list[str]:
        """Every service that waits, directly or through others, for ``service``,
        in bring-up order: what a failure of ``service`` blocks."""
        if service not in self.services:
            raise KeyError(service)
        blocked = {service}
        found: list[str] = []
        for name in (name for level in self.levels() for name in level):
            if blocked.intersection(self.services[name].after):
                blocked.add(name)
                found.append(name)
        return found


def _named(section: str, what: str, key: str, entry: Any) -> Any:
    """``entry`` with ``name`` set to ``key``; the name comes from the key only."""
    _check_name_key(section, what, key)
    if isinstance(entry, Mapping):
        if "name" in entry:
            known = _USER_KEYS[(section, "*")]
            raise _fail(_unknown_key((section, key), "name", known), section, key, "name", on="key")
        return {"name": key, **entry}
    if isinstance(entry, (HostConfig, ServiceConfig)) and entry.name != key:
        raise _fail(f"{what} named '{entry.name}' is filed under '{key}'", section, key, on="key")
    return entry


def _check_name_key(section: str, what: str, key: str) -> None:
    try:
        _check_name(key, what)
    except PydanticCustomError as exc:
        raise _fail(exc.message(), section, key, on="key") from None


def _router_after(services: Mapping[str, Any]) -> dict[str, Any]:
    """A router with no ``after`` waits for every prefill and decode service."""
    def role(entry: Any) -> Any:
        return entry.get("role") if isinstance(entry, Mapping) else getattr(entry, "role", None)

    backends = [name for name, entry in services.items() if role(entry) in BACKEND_ROLES]
    return {
        name: {**entry, "after": backends} if role(entry) == "router" and "after" not in entry else entry
        for name, entry in services.items()
    }


# --------------------------------------------------------------------------- pydantic errors → ConfigError

_USER_KEYS: dict[NodePath, tuple[str, ...]] = {
    (): tuple(f for f in Deployment.model_fields if f != "source"),
    ("hosts", "*"): tuple(f for f in HostConfig.model_fields if f != "name"),
    ("services", "*"): tuple(f for f in ServiceConfig.model_fields if f != "name"),
    ("services", "*", "ready"): tuple(ReadySpec.model_fields),
}

_EXPECTED: dict[NodePath, str] = {
    ("hosts", "*"): "a mapping of host settings (address, user, port, ...)",
    ("services", "*"): "a mapping of service settings (host, unit, role, ...)",
    ("services", "*", "ready"): "a mapping of readiness checks (log, http, tcp)",
}


def _shape(path: NodePath) -> NodePath:
    """The schema position of a path: entry names become ``*``, list indexes go."""
    parts = [part for part in path if not isinstance(part, int)]
    if len(parts) > 1 and parts[0] in ("hosts", "services"):
        parts[1] = "*"
    return tuple(parts)


def _to_config_error(error: Any, positions: _Positions, source: str) -> ConfigError:
    loc: NodePath = tuple(error["loc"])
    kind = error["type"]
    if kind == "pdtui":
        path, on, message = loc + tuple(error["ctx"]["at"]), error["ctx"]["on"], error["msg"]
    elif kind == "extra_forbidden":
        path, on = loc, "key"
        message = _unknown_key(loc[:-1], str(loc[-1]), _USER_KEYS.get(_shape(loc[:-1]), ()))
    elif kind == "missing":
        path, on = loc, "key"
        message = f"{_describe(loc[:-1])} is missing required key '{loc[-1]}'"
    else:
        path, on = loc, "value"
        expected = _EXPECTED.get(_shape(loc), error["msg"][0].lower() + error["msg"][1:])
        message = f"expected {expected}, got {_show(error['input'])}"
    line, col = positions.find(path, on)
    return ConfigError(source, line, col, message)


def _first_error(exc: ValidationError, positions: _Positions, source: str) -> ConfigError:
    """The error to show: the first in the file, but a missing key only when
    nothing else is wrong (a typo shows up as both; the typo says more)."""
    ranked = [
        (error["type"] == "missing", _to_config_error(error, positions, source)) for error in exc.errors()
    ]
    return min(ranked, key=lambda item: (item[0], item[1].line, item[1].col))[1]


# --------------------------------------------------------------------------- entry points

def parse_config(text: str, source: str = "<config>") -> Deployment:
    """Validate the YAML ``text``; ``source`` names it in errors and in the result."""
    root = _compose(text, source)
    if root is None:
        raise ConfigError(source, 1, 1, "empty config, expected a mapping with name, hosts and services")
    walker = _Walker(source)
    try:
        data = walker.walk(root, ())
    except RecursionError:
        raise ConfigError(source, 1, 1, "nested too deeply, expected a config of a sane shape") from None
    if not isinstance(data, dict):
        raise walker.error(root.start_mark, f"expected a mapping with name, hosts and services, got {_show(data)}")
    if "source" in data:
        line, col = walker.positions.find(("source",), "key")
        raise ConfigError(source, line, col, _unknown_key((), "source", _USER_KEYS[()]))
    try:
        return Deployment.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise _first_error(exc, walker.positions, source) from None


def load_config(path: str | os.PathLike[str]) -> Deployment:
    """Read and validate the config file at ``path``; errors name it as given."""
    source = os.fspath(path)
    return parse_config(_read_text(source), source)


def _read_text(source: str) -> str:
    def error(message: str, line: int = 1, col: int = 1) -> ConfigError:
        return ConfigError(source, line, col, message)

    try:
        info = os.stat(source)
        if stat.S_ISDIR(info.st_mode):
            raise error("is a directory, expected a YAML config file")
        if not stat.S_ISREG(info.st_mode):
            raise error("not a regular file, expected a YAML config file")
        with open(source, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise error("no such file, expected a YAML config file") from None
    except OSError as exc:
        raise error(f"cannot read the file ({exc.strerror or exc}), expected a readable YAML config file") from None
    if len(raw) > MAX_FILE_BYTES:
        raise error(f"file larger than {MAX_FILE_BYTES // 1024} KiB, expected a YAML config file")
    if b"\0" in raw:
        raise error("binary file, expected a YAML text file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"byte 0x{raw[exc.start]:02x} is not UTF-8, expected a UTF-8 text file", line, col) from None
