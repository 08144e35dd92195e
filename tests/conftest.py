"""Fixtures every kind of test shares.

- ``sandbox``: a simulated machine in the test's own folder, every process it
  started stopped (by PID) when the test ends, pass or fail.
- The real-SSH fixtures of tests/sshd.py (``sshd``, ``sshd_factory``,
  ``ssh_home``, ...), registered for every test module.

Sandboxes log into a real journal (systemd-journal-remote, read by the real
journalctl) wherever it is installed, as ``pdtui demo`` does; the stand-in's own
tests ask for it by ``real_journal=False``, and ``PDTUI_SIM_REAL_JOURNAL=0`` runs
the whole suite on the stand-in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pdtui.sim.sandbox import Sandbox

pytest_plugins = ["tests.sshd", "tests.conftest_sim", "tests.engine_helpers"]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with Sandbox.create(tmp_path / "sim") as box:
        yield box
