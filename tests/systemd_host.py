"""A real systemd and journald reached over real SSH (pdtui/sim/systemd_host.py), registered by tests/conftest.py.

``systemd_host`` boots a fresh container for one test (about half a second) and
powers it off at teardown, pass or fail: every unit the test installed dies with
it, and no process, cgroup or mount is left. ~/.ssh (``ssh_home``) then trusts its
host key and offers the key it trusts. Where it cannot boot here (not root, no
``systemd-nspawn``, another cgroup layout) the test skips saying why.

``real_deployment`` writes the reference shape for it: the sim's workers and a
router (real or the sim's) as units generated from ``launch:`` blocks, which
``install`` puts on the host with ``pdtui units --install``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdtui.commands import units_command as units
from pdtui.config import Deployment, parse_config
from pdtui.hosts import make_host
from pdtui.sim import systemd_host as container
from pdtui.sim.command_lines import REAL_ROUTERS
from pdtui.sim.ports import free_port
from tests.sshd import SshHome, made_ssh_home, use_home

__all__ = ["Kept", "booted", "install", "kept", "missing_env_file_lines", "real_deployment", "systemd_host"]

REPO = Path(__file__).resolve().parents[1]
# The units run this checkout's sim, whatever pdtui the container's Python would find first.
UNIT_ENV = {"PYTHONPATH": str(REPO)}


@pytest.fixture
def systemd_host(tmp_path: Path, ssh_home: SshHome) -> Iterator[container.SystemdHost]:
    with booted(tmp_path, ssh_home) as host:
        yield host


@contextmanager
def booted(tmp_path: Path, ssh_home: SshHome, **options: Any) -> Iterator[container.SystemdHost]:
    """A fresh container (``options`` as :func:`pdtui.sim.systemd_host.boot` takes them) that ~/.ssh trusts and
    reaches, powered off at the end; the test skips, saying why, where none can boot."""
    reason = container.missing_reason()
    if reason:
        pytest.skip(f"no real systemd: {reason}")
    host = container.boot(tmp_path / "container", **options)     # it binds in this interpreter and checkout
    try:
        ssh_home.use_key(host.client_key)
        with ssh_home.known_hosts.open("a") as out:
            out.write(host.known_hosts_line)
        yield host
    finally:
        host.stop()


class Kept:
    """One container kept for the tests of a module that each start real servers on it (a boot and a power-off
    are 20 s of a loaded machine, more than some of those tests): before and after each, :meth:`fresh` leaves it
    as a boot does for units named ``prefix``*."""

    def __init__(self, host: container.SystemdHost, home: SshHome, prefix: str) -> None:
        self.host, self.home, self.prefix = host, home, prefix

    def fresh(self) -> None:
        """Every unit of the prefix killed (a server left hanging on purpose too: no stop timeout waited out), its
        failure forgotten, its unit, enablement and secrets files removed and systemd's view reloaded, so that none
        is loaded any more (an enabled one stays loaded, its last InvocationID with it, while a link names it); the
        journal emptied, so that no line of an earlier test's unit of the same name is read as this one's."""
        units = f"{self.prefix}*"
        script = (f"systemctl kill -s KILL '{units}'; systemctl stop '{units}'; systemctl reset-failed '{units}'; "
                  f"rm -f /etc/systemd/system/{units} /etc/systemd/system/*.wants/{units}; rm -rf /etc/pdtui/env; "
                  "systemctl daemon-reload; journalctl --rotate -q && journalctl --vacuum-time=1s -q")
        done = self.host.run("sh", "-c", script, timeout=60)
        assert done.returncode == 0, done.stderr
        loaded = self.host.run("systemctl", "list-units", "--all", "--plain", "--no-legend", units).stdout
        assert not loaded.strip(), f"still loaded after the clean-up: {loaded}"

    def lent(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[container.SystemdHost]:
        """The container for one test, fresh, with ~/.ssh trusting it for as long as ``monkeypatch`` lasts."""
        use_home(self.home, monkeypatch)
        self.fresh()
        try:
            yield self.host
        finally:
            self.fresh()


@contextmanager
def kept(folder: Path, prefix: str, **options: Any) -> Iterator[Kept]:
    """A container (``options`` as :func:`booted` takes them) with a ~/.ssh of its own, for :class:`Kept`."""
    home = made_ssh_home(folder)
    with booted(folder, home, **options) as host:
        yield Kept(host, home, prefix)


def real_deployment(host: container.SystemdHost, folder: Path, *, router: str = "sim", timeout: str = "30s",
                    prefill: Sequence[str] = (), decode: Sequence[str] = (), startup: float = 0.4,
                    second_decode: Sequence[str] | None = None, **top: Any) -> Deployment:
    """prefill, decode and a router on the container, each a unit made from its ``launch:`` block.

    ``prefill``/``decode``: extra flags for that worker (``["--fail", "oom"]``); ``second_decode``: a decode-1
    beside them with these flags (``{bootstrap}`` in one is the prefill's bootstrap port); ``router``: ``sim`` or a
    real router's package; ``top``: more top-level keys of the config.
    """
    p, d, r, boot = (free_port() for _ in range(4))

    def worker(extra: Sequence[str]) -> dict:
        return {"command": [sys.executable, "-m", "pdtui.sim.worker"], "model": "m", "tp": 1,
                "args": ["--startup", str(startup), *extra], "env": UNIT_ENV}

    if router in REAL_ROUTERS:
        router_launch: dict = {"package": router, "python": sys.executable}
    else:
        router_launch = {"command": [sys.executable, "-m", "pdtui.sim.router"], "env": UNIT_ENV}
    config = {
        "name": "real", **top,
        "hosts": {"gpu0": {"address": "127.0.0.1", "port": host.port, "user": "root"}},
        "services": {
            "prefill": {"host": "gpu0", "unit": "t-prefill", "role": "prefill", "port": p, "bootstrap_port": boot,
                        "timeout": timeout, "launch": worker(prefill)},
            "decode": {"host": "gpu0", "unit": "t-decode", "role": "decode", "port": d, "timeout": timeout,
                       "launch": worker(decode)},
            "router": {"host": "gpu0", "unit": "t-router", "role": "router", "port": r, "timeout": timeout,
                       "launch": {**router_launch, "host": "127.0.0.1", "prometheus_port": free_port()}},
        },
    }
    if second_decode is not None:
        flags = [flag.format(bootstrap=boot) for flag in second_decode]
        config["services"] = {**config["services"], "decode-1": {
            "host": "gpu0", "unit": "t-decode-1", "role": "decode", "port": free_port(), "timeout": timeout,
            "launch": worker(flags)}}
        config["services"]["router"] = config["services"].pop("router")      # the router last, after them all
    path = folder / "pdtui.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return parse_config(path.read_text(), str(path))


async def install(deployment: Deployment, *, yes: bool = False) -> None:
    """``pdtui units --install``: the units written on the host and systemd reloaded."""
    assert await units.install(deployment, make_host, yes=yes) == 0


def missing_env_file_lines(unit: str, description: str) -> list[str]:
    """systemd 252's lines when a start finds its unit's EnvironmentFile= missing: the start job fails with result
    'resources' before any process (the real test and the sim's both expect these)."""
    return [f"{unit}: Failed to load environment files: No such file or directory",
            f"{unit}: Failed to run 'start' task: No such file or directory",
            f"{unit}: Failed with result 'resources'.",
            f"Failed to start {unit} - {description}."]
