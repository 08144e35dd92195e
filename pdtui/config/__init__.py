"""The deployment config: YAML in, a typed and validated :class:`Deployment` out.

Every failure becomes one :class:`ConfigError` line, ``FILE:LINE:COL: what was expected``,
pointing at the key (an unknown key) or the value (a wrong value) to blame. The package:

- ``yamlpos``: the YAML layer (nodes with their positions; duplicate keys caught)
- ``fields``: each value's type check, the wording of what was expected and the JSON Schema of what it takes
- ``schema``: the core's pydantic models (role defaults, cross-checks)
- ``places``: what the places of every kind share (a name; a machine's address, how its commands run)
- ``placement``: the kinds of place services run on, each a target's settings, and the models they compose
- ``graph``: the dependency graph (cycles, bring-up levels, what a failure blocks)
- ``errors``: the error line and its wording
- ``loader``: file -> Deployment, pydantic's errors turned into ConfigError
- ``json_schema``: the config's JSON Schema for editors, made from the models (``pdtui schema``)

The names below are imported when first used (PEP 562): ``discovery`` and ``trust`` need none of them, and TAB
completion, which runs pdtui once per key press, finds and vets a config with those two without paying for pydantic.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdtui.config.defaults import (
        BACKEND_ROLES,
        DEFAULT_BOOTSTRAP_PORT,
        DEFAULT_TIMEOUT,
        DEFAULT_UNHEALTHY_AFTER,
        ROLES,
        Role,
    )
    from pdtui.config.errors import ConfigError
    from pdtui.config.fields import parse_duration
    from pdtui.config.loader import load_config, parse_config
    from pdtui.config.placement import PlacementKind, Placements, register
    from pdtui.config.schema import Deployment, ReadySpec, ServiceConfig

_HOMES = {
    "defaults": ("BACKEND_ROLES", "DEFAULT_BOOTSTRAP_PORT", "DEFAULT_TIMEOUT", "DEFAULT_UNHEALTHY_AFTER",
                 "ROLES", "Role"),
    "errors": ("ConfigError",),
    "fields": ("parse_duration",),
    "placement": ("PlacementKind", "Placements", "register"),
    "loader": ("load_config", "parse_config"),
    "schema": ("Deployment", "ReadySpec", "ServiceConfig"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "BACKEND_ROLES", "DEFAULT_BOOTSTRAP_PORT", "DEFAULT_TIMEOUT", "DEFAULT_UNHEALTHY_AFTER", "ROLES",
    "ConfigError", "Deployment", "PlacementKind", "Placements", "ReadySpec", "Role", "ServiceConfig",
    "load_config", "parse_config", "parse_duration", "register",
]


def __getattr__(name: str) -> object:
    """One of the package's names, imported from its module the first time it is asked for."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
