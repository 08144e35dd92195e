"""The config's JSON Schema: what an editor checks a ``pdtui.yaml`` against while it is typed.

It is made from the models (pydantic's ``model_json_schema``, each field type saying what its check accepts: see
:class:`~pdtui.config.fields.Check`), never written by hand. ``pdtui schema`` prints it; a copy ships beside the
sample configs (``pdtui.schema.json``), which name it on their first line for YAML language servers, as a config
``pdtui init`` writes does. ``scripts/schema`` writes that copy, and a test fails while it differs from what the
models make.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pdtui.config.placement import Placements, registered
from pdtui.support.data import data_dir

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE = "pdtui.schema.json"


def config_schema(placements: Placements | None = None) -> dict[str, Any]:
    """The JSON Schema of a config file, as the models of ``placements`` (the registered kinds') make it today."""
    return {"$schema": DIALECT, **(placements or registered()).deployment.model_json_schema()}


def schema_text(placements: Placements | None = None) -> str:
    """The schema as ``pdtui schema`` prints it and the shipped file holds it: stable, indented, one newline last."""
    return json.dumps(config_schema(placements), indent=2, ensure_ascii=False) + "\n"


def shipped_schema() -> Path:
    """The schema file of this installation, beside the sample configs (a checkout's, or the wheel's)."""
    return data_dir("sample_configs") / SCHEMA_FILE


def modeline(schema: str) -> str:
    """The comment that names a config's schema for YAML language servers (VS Code's YAML extension, Neovim's
    yamlls, ...): ``schema`` a path relative to the config, an absolute one or a ``file:`` URI (no spaces: the
    server reads the path up to the first one)."""
    return f"# yaml-language-server: $schema={schema}"
