"""From a file to a :class:`Deployment`: the YAML layer, then the schema, every failure one ConfigError."""

from __future__ import annotations

import os
from typing import Any

from pydantic import ValidationError

from pdtui.config.errors import ConfigError, NodePath, describe, show, unknown_key
from pdtui.config.job import JobSpec
from pdtui.config.launch import LaunchSpec
from pdtui.config.schema import ClusterConfig, Deployment, HostConfig, NodeConfig, ReadySpec, ServiceConfig
from pdtui.config.yamlpos import Positions, Walker, compose, read_text

_USER_KEYS: dict[NodePath, tuple[str, ...]] = {
    (): tuple(f for f in Deployment.model_fields if f != "source"),
    ("hosts", "*"): tuple(f for f in HostConfig.model_fields if f != "name"),
    ("clusters", "*"): tuple(f for f in ClusterConfig.model_fields if f != "name"),
    ("services", "*"): tuple(f for f in ServiceConfig.model_fields if f != "name"),
    ("services", "*", "ready"): tuple(ReadySpec.model_fields),
    ("services", "*", "hosts"): tuple(NodeConfig.model_fields),
    ("services", "*", "launch"): tuple(LaunchSpec.model_fields),
    ("services", "*", "job"): tuple(JobSpec.model_fields),
}

_EXPECTED: dict[NodePath, str] = {
    ("hosts", "*"): "a mapping of host settings (address, user, port, ...)",
    ("clusters", "*"): "a mapping of cluster settings (address or local, output_dir, ...)",
    ("services", "*"): "a mapping of service settings (host, unit, role, ...)",
    ("services", "*", "ready"): "a mapping of readiness checks (log, http, tcp)",
    ("services", "*", "hosts"): "a host name, or a mapping of a node's host and its gpus, numa, port or unit",
    ("services", "*", "launch"): "a mapping of launch settings (model, tp, args, ...)",
    ("services", "*", "job"): "a mapping of job settings (partition, gpus_per_node, time, ...)",
}


def _shape(path: NodePath) -> NodePath:
    """The schema position of a path: entry names become ``*``, list indexes go."""
    parts = [part for part in path if not isinstance(part, int)]
    if len(parts) > 1 and parts[0] in ("hosts", "clusters", "services"):
        parts[1] = "*"
    return tuple(parts)


def _to_config_error(error: Any, positions: Positions, source: str) -> ConfigError:
    loc: NodePath = tuple(error["loc"])
    kind = error["type"]
    if kind == "pdtui":
        path, on, message = loc + tuple(error["ctx"]["at"]), error["ctx"]["on"], error["msg"]
    elif kind == "extra_forbidden":
        path, on = loc, "key"
        message = unknown_key(loc[:-1], str(loc[-1]), _USER_KEYS.get(_shape(loc[:-1]), ()))
    elif kind == "missing":
        path, on = loc, "key"
        message = f"{describe(loc[:-1])} is missing required key '{loc[-1]}'"
    else:
        path, on = loc, "value"
        expected = _EXPECTED.get(_shape(loc), error["msg"][0].lower() + error["msg"][1:])
        message = f"expected {expected}, got {show(error['input'])}"
    line, col = positions.find(path, on)
    return ConfigError(source, line, col, message)


def _first_error(exc: ValidationError, positions: Positions, source: str) -> ConfigError:
    """The error to show: the first in the file, but a missing key only when
    nothing else is wrong (a typo shows up as both; the typo says more)."""
    ranked = [
        (error["type"] == "missing", _to_config_error(error, positions, source)) for error in exc.errors()
    ]
    return min(ranked, key=lambda item: (item[0], item[1].line, item[1].col))[1]


# --------------------------------------------------------------------------- entry points

def parse_config(text: str, source: str = "<config>") -> Deployment:
    """Validate the YAML ``text``; ``source`` names it in errors and in the result."""
    root = compose(text, source)
    if root is None:
        raise ConfigError(source, 1, 1, "empty config, expected a mapping with name, hosts and services")
    walker = Walker(source)
    try:
        data = walker.walk(root, ())
    except RecursionError:
        raise ConfigError(source, 1, 1, "nested too deeply, expected a config of a sane shape") from None
    if not isinstance(data, dict):
        raise walker.error(root.start_mark, f"expected a mapping with name, hosts and services, got {show(data)}")
    if "source" in data:
        line, col = walker.positions.find(("source",), "key")
        raise ConfigError(source, line, col, unknown_key((), "source", _USER_KEYS[()]))
    try:
        deployment = Deployment.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise _first_error(exc, walker.positions, source) from None
    deployment._positions = walker.positions
    return deployment


def load_config(path: str | os.PathLike[str]) -> Deployment:
    """Read and validate the config file at ``path``; errors name it as given."""
    source = os.fspath(path)
    return parse_config(read_text(source), source)


