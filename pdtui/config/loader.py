"""From a file to a :class:`Deployment`: the YAML layer, then the schema, every failure one ConfigError."""

from __future__ import annotations

import os
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from pdtui.config.errors import ConfigError, NodePath, show
from pdtui.config.placement import Placements, registered
from pdtui.config.schema import Deployment, user_keys
from pdtui.config.yamlpos import Positions, Walker, compose, read_text


def _model_at(root: type[BaseModel], path: NodePath) -> type[BaseModel] | None:
    """The model of what sits at ``path`` of a config (its named entries and list items looked through), if a
    model's instance sits there."""
    here: Any = root
    for part in path:
        if isinstance(here, type) and issubclass(here, BaseModel):
            field = here.model_fields.get(str(part))
            if field is None:
                return None
            here = _inner(field.annotation)
        elif isinstance(here, tuple):       # a mapping's values or a list's items: ``part`` is a key or an index
            here = here[0]
        else:
            return None
    return here if isinstance(here, type) and issubclass(here, BaseModel) else None


def _inner(annotation: Any) -> Any:
    """What a field's annotation holds: a model, ``(X,)`` for a mapping or list of X, else None."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _inner(args[0])
    if origin in (Union, UnionType):
        found = [_inner(arg) for arg in args if arg is not NoneType]
        return found[0] if len(found) == 1 else None
    if origin is dict:
        return (_inner(args[1]),)
    if origin in (tuple, list):
        return (_inner(args[0]),)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _to_config_error(error: Any, positions: Positions, source: str, placements: Placements) -> ConfigError:
    loc: NodePath = tuple(error["loc"])
    kind = error["type"]
    root = placements.deployment
    if kind == "pdtui":
        path, on, message = loc + tuple(error["ctx"]["at"]), error["ctx"]["on"], error["msg"]
    elif kind == "extra_forbidden":
        path, on = loc, "key"
        model = _model_at(root, loc[:-1])
        message = placements.wording.unknown_key(loc[:-1], str(loc[-1]), user_keys(model) if model else ())
    elif kind == "missing":
        path, on = loc, "key"
        message = f"{placements.wording.describe(loc[:-1])} is missing required key '{loc[-1]}'"
    else:
        path, on = loc, "value"
        model = _model_at(root, loc)
        expected = getattr(model, "EXPECTED", None) or error["msg"][0].lower() + error["msg"][1:]
        message = f"expected {expected}, got {show(error['input'])}"
    line, col = positions.find(path, on)
    return ConfigError(source, line, col, message)


def _first_error(exc: ValidationError, positions: Positions, source: str, placements: Placements) -> ConfigError:
    """The error to show: the first in the file, but a missing key only when
    nothing else is wrong (a typo shows up as both; the typo says more)."""
    ranked = [
        (error["type"] == "missing", _to_config_error(error, positions, source, placements)) for error in exc.errors()
    ]
    return min(ranked, key=lambda item: (item[0], item[1].line, item[1].col))[1]


# --------------------------------------------------------------------------- entry points

def parse_config(text: str, source: str = "<config>", placements: Placements | None = None) -> Deployment:
    """Validate the YAML ``text`` against the kinds of ``placements`` (the registered ones by default); ``source``
    names it in errors and in the result."""
    placements = placements or registered()
    shape = f"a mapping with name, {placements.kinds[0].section} and services"
    root = compose(text, source)
    if root is None:
        raise ConfigError(source, 1, 1, f"empty config, expected {shape}")
    walker = Walker(source, placements.wording)
    try:
        data = walker.walk(root, ())
    except RecursionError:
        raise ConfigError(source, 1, 1, "nested too deeply, expected a config of a sane shape") from None
    if not isinstance(data, dict):
        raise walker.error(root.start_mark, f"expected {shape}, got {show(data)}")
    if "source" in data:
        line, col = walker.positions.find(("source",), "key")
        raise ConfigError(source, line, col, placements.wording.unknown_key((), "source", user_keys(placements.deployment)))
    try:
        deployment = placements.deployment.model_validate({**data, "source": source})
    except ValidationError as exc:
        raise _first_error(exc, walker.positions, source, placements) from None
    deployment._positions = walker.positions
    return deployment


def load_config(path: str | os.PathLike[str], placements: Placements | None = None) -> Deployment:
    """Read and validate the config file at ``path``; errors name it as given."""
    source = os.fspath(path)
    return parse_config(read_text(source), source, placements)


