"""Fixtures every kind of test shares.

Tests are grouped by kind: ``unit/`` (pure, in-process, fast), ``integration/``
(the sim's units, real OpenSSH, the real journal and routers), ``ui/`` (the
Textual app under ``run_test``, and its snapshots).

- ``sandbox``: a simulated machine in the test's own folder, every process it
  started stopped (by PID) when the test ends, pass or fail.
- ``each_journal``: the same, once on the real journal and once on the stand-in.
- ``demo_sandbox``: the folder for a ``pdtui demo --sandbox`` the test runs, what it left running stopped at the end.
- The real-SSH fixtures of tests/sshd.py (``sshd``, ``sshd_factory``,
  ``ssh_home``, ...), registered for every test module.
- The private Slurm cluster of tests/slurm.py (``slurm``), likewise.

Sandboxes log into a real journal (systemd-journal-remote, read by the real
journalctl) wherever it is installed, as ``pdtui demo`` does; the stand-in's own
tests ask for it by ``real_journal=False``, and ``PDTUI_SIM_REAL_JOURNAL=0`` runs
the whole suite on the stand-in.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import pdtui.targets  # noqa: F401  (the targets register their settings of the config: every test's configs use them)
from pdtui.sim import realjournal
from pdtui.sim.demo import PORTS_ENV
from pdtui.sim.sandbox import Sandbox
from tests.conftest_sim import TEARDOWN_GRACE

pytest_plugins = ["tests.sshd", "tests.conftest_sim", "tests.engine_helpers", "tests.slurm", "tests.systemd_host",
                  "tests.real_sglang", "tests.real_vllm"]

SIGINT_IGNORED = "PDTUI_TESTS_SIGINT_IGNORED"
"""Set when the suite was started with SIGINT ignored; the workers pytest-xdist starts read it."""


def pytest_configure(config: pytest.Config) -> None:
    """The processes the tests start get SIGINT's default handling, as at a terminal, also when the suite runs from a
    shell that ignores it (``nohup ... &``): the tests that press Ctrl-C signal them and expect it to act.

    An ignored signal stays ignored across ``exec``, a handled one goes back to its default; so the suite's own
    processes handle SIGINT by doing nothing. They still ignore it, as they were asked, and what they start does not.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN or os.environ.get(SIGINT_IGNORED):
        os.environ[SIGINT_IGNORED] = "1"
        signal.signal(signal.SIGINT, _ignore)


def _ignore(signum: int, frame: object) -> None:
    """SIGINT handled by doing nothing: ignored here, its default in every process started from here."""


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every bring-up records its run in the history: the tests' runs go to a folder of their own, never $HOME's."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before


@pytest.fixture(autouse=True, scope="session")
def _demo_ports() -> Iterator[None]:
    """Every demo a test starts takes ports the OS picks: the reference ports (30000...) are the machine's to share
    with other demos and servers, and one found free can be taken before the worker binds it."""
    before = os.environ.get(PORTS_ENV)
    os.environ[PORTS_ENV] = "any"
    yield
    if before is None:
        os.environ.pop(PORTS_ENV, None)
    else:
        os.environ[PORTS_ENV] = before


@contextmanager
def torn_down(box: Sandbox) -> Iterator[Sandbox]:
    """``box``, stopped and removed when the test ends, pass or fail, without waiting for its servers to drain."""
    try:
        yield box
    finally:
        box.cleanup(TEARDOWN_GRACE)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with torn_down(Sandbox.create(tmp_path / "sim")) as box:
        yield box


@pytest.fixture
def demo_sandbox(tmp_path: Path) -> Iterator[Path]:
    """The folder a demo the test starts keeps its simulated machine in (``--sandbox``): whatever is still running
    there when the test ends is stopped by PID, also when the demo was killed or the test failed."""
    root = tmp_path / "sim"
    yield root
    if root.exists():
        Sandbox(root).stop_all(TEARDOWN_GRACE)


@pytest.fixture(params=["real", "stand-in"])
def each_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    real = request.param == "real"
    if real and not realjournal.available():
        pytest.skip(f"no real journal: {realjournal.missing_reason()}")
    with torn_down(Sandbox.create(tmp_path / "sim", real_journal=real)) as box:
        yield box
