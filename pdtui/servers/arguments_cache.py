"""Each engine's parser as a host's Python last described it, kept in the user's cache folder between runs.

Asking an engine for its parser imports it (seconds to tens of seconds); asking which version is installed takes
a Python's start. So a host's answer is kept, one private file (0600 in a 0700 folder, never through a link) per
host, Python and engine, with the version it describes: the next bring-up sends that version along, and the probe
answers with the version alone while it is still the one installed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pdtui.support.private_files import read_private, replace_private

FOLDER = "engine-arguments"


def cache_folder(env: Mapping[str, str] = os.environ) -> Path:
    """Where the answers are kept: ``$XDG_CACHE_HOME/pdtui/engine-arguments`` (``~/.cache`` unless set to an
    absolute path)."""
    cache = env.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and os.path.isabs(cache) else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "pdtui" / FOLDER


class ArgumentsCache:
    """Answers by (host, Python, engine); a file that cannot be read or written is as if there were none."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder or cache_folder()

    def _path(self, host: str, python: str, engine: str) -> Path:
        key = hashlib.sha256("\0".join((host, python, engine)).encode()).hexdigest()[:32]
        return self.folder / f"{engine}-{key}.json"

    def load(self, host: str, python: str, engine: str) -> dict[str, Any] | None:
        """The answer kept for that host's Python and engine (None: none, or not one pdtui wrote)."""
        text = read_private(self._path(host, python, engine))
        try:
            answer = json.loads(text) if text else None
        except ValueError:
            return None
        return answer if isinstance(answer, dict) and isinstance(answer.get("version"), str) else None

    def keep(self, host: str, python: str, engine: str, answer: Mapping[str, Any]) -> None:
        """Keep ``answer`` in place of the last; a cache folder that cannot be written is left as it is."""
        try:
            replace_private(self._path(host, python, engine), json.dumps(answer, separators=(",", ":")))
        except OSError:
            pass
