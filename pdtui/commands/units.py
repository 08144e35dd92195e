"""``pdtui units CONFIG``: the systemd units of the deployment, generated from its config.

Printed by default; ``--out DIR`` writes one ``<unit>.service`` per service.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pdtui.config import Deployment
from pdtui.unit_files import UnitFile, render_units


def print_units(units: list[UnitFile]) -> None:
    for index, unit in enumerate(units):
        if index:
            print()
        print(f"# ---- {unit.name} on {unit.host} " + "-" * max(0, 60 - len(unit.name) - len(unit.host)))
        print(unit.text, end="")


def write_units(units: list[UnitFile], out: Path) -> list[Path]:
    """Each unit to ``out/<unit>``, atomically (a temporary file renamed over it)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in units:
        path = out / unit.name
        fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{unit.name}.")
        with os.fdopen(fd, "w") as file:
            file.write(unit.text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        written.append(path)
    return written


def run(deployment: Deployment, out: str | None) -> int:
    units = render_units(deployment)
    if not units:
        print(f"pdtui: no service of {deployment.source} has a launch: block, so there is no unit to generate",
              file=sys.stderr)
        return 1
    if out is None:
        print_units(units)
        return 0
    for path in write_units(units, Path(out)):
        print(f"wrote {path}")
    return 0
