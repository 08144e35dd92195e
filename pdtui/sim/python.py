"""How the sim's own programs are started: stdlib and pdtui only, so they never import site-packages."""

from __future__ import annotations

import sys


def sim_python(module: str) -> list[str]:
    """argv running a sim program (stdlib and pdtui only) without ``site``.

    ``-S`` skips site-packages and every ``.pth`` file in it (one that imports
    certifi costs ~30 ms per start): the sim's systemctl and journalctl run once
    per command pdtui sends, and a deployment starts a supervisor per unit.
    pdtui is found through PYTHONPATH, which the sim sets for everything it
    starts (:func:`pdtui.sim.systemctl.package_env`).
    """
    return [sys.executable, "-S", "-m", module]
