"""A machine's connection as a service's run uses it, whatever the target: one per host or cluster.

A :class:`Session` owns the Host (one connection), commands within a deadline
and the HTTP prober whose requests travel through the connection. Each target
extends it with its own tools (targets/systemd/host_session.py,
targets/slurm/cluster_session.py). :class:`Targets` is how the orchestrator is
handed every kind of target (targets/registry.py's ``Registry``), so that no
engine module imports one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pdtui.engine.batcher import Batcher
from pdtui.hosts.base import Host, Result
from pdtui.hosts.http import HttpProber

if TYPE_CHECKING:
    from pdtui.config import Deployment, ServiceConfig
    from pdtui.engine.preflight import Reacher
    from pdtui.engine.service_run import ServiceRun


class Looks(Protocol):
    """What a session's batched looks tell of themselves: a slow machine is looked at less often."""

    last_took: float


class Session:
    """A machine's connection as a run uses it: commands within a deadline, HTTP probes through it."""

    looker: Looks
    # What the preflight may read of the place's machine: whether its services share one machine (its ports, GPUs
    # and fabric are theirs to compare), and how to read its GPUs and its sysfs (None: not this place's to read).
    one_machine: bool = False
    nvidia_smi: tuple[str, ...] | None = None
    sysfs: str | None = None

    def __init__(self, name: str, host: Host, *, command_timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.host = host
        self.prober = HttpProber(host)
        self.batchers: list[Batcher[Any]] = []     # its batched commands: ended at close
        self._command_timeout = command_timeout
        self._clock = clock

    async def command(self, argv: list[str], deadline: float | None = None, *, read_only: bool = False,
                      waits: bool = False, input: bytes | None = None) -> Result:
        """Run ``argv`` there, within the command timeout and ``deadline`` (``read_only``: see :meth:`read`).
        ``waits``: the command itself waits for what it asked (``systemctl stop`` returns once the unit has
        stopped, which its ``TimeoutStopSec=`` lets take 90 s): all of ``deadline`` is its, not the command timeout.
        ``input``: its stdin (a file's content, never an argv's word)."""
        timeout = self._command_timeout
        if deadline is not None:
            left = deadline - self._clock()
            timeout = max(0.1, left if waits else min(timeout, left))
        if input is not None:
            return await self.host.run(argv, timeout=timeout, read_only=read_only, input=input)
        return await self.host.run(argv, timeout=timeout, read_only=read_only)

    async def read(self, argv: list[str], deadline: float | None = None) -> Result:
        """A command that changes nothing there (a look, a read): it may share one remote command with the other
        reads asked at the same moment (see the Host protocol's ``run``)."""
        return await self.command(argv, deadline, read_only=True)

    # -- what a target implements (see pdtui/targets/__init__.py) ----------------------------------------
    async def preflight(self, runs: Sequence[ServiceRun], reacher: Reacher, *, starting: bool) -> bool:
        """Look at each of ``runs`` (its services here) before anything is touched, through ``reacher`` (which
        tries again while the place cannot be reached); fail those that cannot be brought up. ``starting``: the
        intent starts services (``up``, ``restart``), so what would run is checked too. True when none failed."""
        raise NotImplementedError

    def follow(self, runs: Sequence[ServiceRun], on_problem: Callable[[str], None]) -> Coroutine[Any, Any, None] | None:
        """Follow the output of ``runs`` from now on, handing each line to its run's ``lines.take``: the coroutine of
        the task that does it, or None where each run follows its own (a Slurm job's output file)."""
        return None

    async def close(self) -> None:
        """End the commands under way (a look whose askers are gone must not outlive the session), the probes'
        connections, then the connection."""
        for batcher in self.batchers:
            await batcher.close()
        await self.prober.close()
        try:
            await self.host.close()
        except Exception:   # closing a broken connection must not hide the real outcome
            pass


class Targets(Protocol):
    """Every kind of target, as the composition root (the commands, the demo, a bench, a test) hands them to the
    orchestrator: the engine imports no target, so a new kind is a package and a line in targets/registry.py."""

    def new_run(self, cfg: ServiceConfig) -> ServiceRun:
        """A service's run on its target."""

    def open_sessions(self, deployment: Deployment, places: Collection[str], on_status: Callable[..., None], *,
                      command_timeout: float, clock: Callable[[], float]) -> dict[str, Session]:
        """A session for each of ``places`` (the hosts and clusters the services name), each its own connection."""
