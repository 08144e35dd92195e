"""How ``restart`` and ``down`` read ``[CONFIG] SERVICE...``: where CONFIG stands among the words, and the role words
that stand for services. Light (no config is loaded here): TAB completion reads a line by the same rules."""

from __future__ import annotations

import os

ROLE_WORDS = {"prefills": "prefill", "decodes": "decode"}
"""A word that stands for every service of its role (``pdtui restart --rolling decodes``)."""


def config_among(targets: list[str]) -> int | None:
    """Where CONFIG is among ``[CONFIG] SERVICE...``: anywhere where it ends .yaml or .yml, else first when it is a
    file; None when none is (the config is then the one bare pdtui finds)."""
    at = next((i for i, t in enumerate(targets) if t.endswith((".yaml", ".yml"))), None)
    if at is None and targets and os.path.isfile(targets[0]):
        at = 0
    return at
