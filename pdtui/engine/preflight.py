"""Before anything is touched: every host and cluster reached, every service looked at, the GPUs' split judged.

Each target checks its own services (:meth:`Session.preflight`: a host's unit
looks and installed units, a cluster's job looks); the GPU inventory of every
host is taken meanwhile, and its findings told once both are in. A host that
cannot be reached yet (sshd not up) is tried again until the longest timeout of
its services, and its status says so.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from typing import TypeVar

from pdtui.config import BACKEND_ROLES, Deployment
from pdtui.engine.checks.flags import EngineFlags
from pdtui.engine.events import Event, Notice, PreflightFinding
from pdtui.engine.intent import Verb
from pdtui.engine.service_run import ServiceRun
from pdtui.engine.session import Session
from pdtui.engine.states import ServiceState
from pdtui.fabric.findings import Server, fabric_mismatches, numa_apart, pair_numa_mismatches
from pdtui.fabric.side_channel import side_channel_mismatches
from pdtui.fabric.sysfs import Fabric, read_fabric
from pdtui.fabric.topo import read_links
from pdtui.fabric.ucx import NIXL, nixl_ucx
from pdtui.gpus.inventory import Inventory, gpu_hosts, host_hardware, preflight_findings, process_tree
from pdtui.gpus.nvidia_smi import sampler_argv
from pdtui.gpus.sampler import GpuSampler
from pdtui.hosts.base import Host, HostUnreachable
from pdtui.servers import Mismatch, ServerCommand
from pdtui.support.backoff import Backoff

S = ServiceState
T = TypeVar("T")

# An unreachable host is tried again with this backoff, until its services' longest timeout.
RETRY, RETRY_MAX = 0.5, 5.0


def refuses(found: Mismatch, deployment: Deployment) -> bool:
    """Whether a finding stops what it names: an error, or with ``strict: true`` a warning too."""
    return found.level == "error" or (deployment.strict and found.level == "warning")


def finding(found: Mismatch, service: ServiceRun, elapsed: float) -> PreflightFinding:
    """A mismatch as the faces are told it, under the service it fails first."""
    return PreflightFinding(found.level, found.kind, service.name, service.cfg.host, found.setting, found.values,
                            found.sources, found.text, elapsed)


def overridden(found: Mismatch, service: str, elapsed: float) -> Notice:
    """What ``--force`` says of each refusal it starts despite."""
    return Notice("warning", f"--force: starting despite this: {found.text}", service, elapsed)


class Reacher:
    """A place's first looks, tried again while it cannot be reached, until a deadline."""

    def __init__(self, place: str, deadline: float, clock: Callable[[], float]) -> None:
        self.place = place
        self.deadline = deadline
        self.retried = False          # reached only after retries (its first GPU inventory found no connection)
        self._clock = clock

    async def reach(self, look: Callable[[], Awaitable[T]]) -> T:
        """``look()``; while the place is unreachable, again after a growing pause; the last try at the deadline."""
        backoff = Backoff(RETRY, RETRY_MAX)
        while True:
            try:
                return await look()
            except HostUnreachable:
                left = self.deadline - self._clock()
                if left <= 0:
                    raise
                self.retried = True
                await asyncio.sleep(min(backoff.next(), left))


class Preflight:
    """The deployment's preflight for one intent: reach, look, judge the GPUs; True when nothing failed."""

    def __init__(self, deployment: Deployment, sessions: Mapping[str, Session],
                 on_place: Mapping[str, Sequence[ServiceRun]], *, verb: Verb, clock: Callable[[], float],
                 emit: Callable[[Event], None], elapsed: Callable[[], float], force: bool = False,
                 restarting: Sequence[str] = ()) -> None:
        self.deployment = deployment
        self.force = force
        self.restarting = restarting        # a restart's services: the only ones its refusals stop
        self.sessions = sessions
        self.on_place = on_place
        self.verb = verb
        self.clock = clock
        self.emit = emit
        self.elapsed = elapsed
        self.samplers: list[asyncio.Task] = []      # the GPU samplers it started (the caller ends them)
        self._reachers: dict[str, Reacher] = {}
        self._runs = {r.name: r for runs in on_place.values() for r in runs}     # every service, by name

    def reaching_for(self, place: str) -> float:
        """How long the preflight goes on trying to reach ``place`` (-inf once reached, or when not trying)."""
        reacher = self._reachers.get(place)
        return reacher.deadline - self.clock() if reacher is not None else -math.inf

    def reached(self, place: str) -> None:
        self._reachers.pop(place, None)

    async def run(self, *, sample_gpus: bool) -> bool:
        """Reach every place and look at every service; the GPUs' findings, and their samplers when asked."""
        now = self.clock()
        reachers = {p: Reacher(p, now + max(r.cfg.timeout for r in self.on_place[p]), self.clock)
                    for p in self.sessions}
        self._reachers = dict(reachers)
        starting = self.verb in (Verb.UP, Verb.RESTART)
        # The GPU inventory, the fabric and the engines' flags are read while the services are looked at, and their
        # command lines judged against each other as soon as every look is in: none waits for another.
        (results, commands, among), (inventories, fabrics), flags = await asyncio.gather(
            self._look_and_compare(reachers, compare=starting), self._hardware(self._hosts(), fabric=starting),
            self._flags(starting))
        # a host reached only after retries had its hardware asked too early: asked again
        if again := {p: self.sessions[p].host for p in self.sessions if reachers[p].retried
                     and (inventories.get(p, ...) is None or fabrics.get(p, ...) is None)}:
            more_inventories, more_fabrics = await self._hardware(again, fabric=starting)
            inventories |= more_inventories
            fabrics |= more_fabrics
        gpus_ok = await self._judge_gpus(inventories, sample=sample_gpus)
        commands_ok = True
        if starting:
            among = [*among, *flags, *await self._pair_paths(commands, inventories)]
            commands_ok = self._judge_commands(commands, among, inventories, fabrics)
        if starting:
            self._refuse_the_command()
        for run in self._runs.values():
            run.planned = None      # compared: not kept for the run's life (a fleet's command lines hold 1.4 MB)
        return all(results) and gpus_ok and commands_ok

    def _refuse_the_command(self) -> None:
        """A refusal refuses the command (an installed unit that runs something else than the config says, a pair,
        a host, a fabric): nothing it was to start starts, not even what no refusal named."""
        runs = self._runs
        starting = self._starting()
        if not any(runs[name].refused for name in starting):
            return
        for name in starting:
            if runs[name].state is S.PENDING:
                runs[name].transition(S.BLOCKED, "the preflight refused the servers as they would run")

    async def _flags(self, starting: bool) -> list[Mismatch]:
        """The launch flags of what this command starts, read against the engines installed where they run."""
        if not starting:
            return []

        def tell(text: str, service: str | None) -> None:
            self.emit(Notice("warning", text, service, self.elapsed()))

        return await EngineFlags(self.deployment, self.sessions, self._runs, tell).mismatches(self._starting())

    def _starting(self) -> set[str]:
        """What this command would start: a restart's services, else every service."""
        return set(self.restarting) if self.restarting else set(self._runs)

    async def _hardware(self, hosts: Mapping[str, Host], *, fabric: bool) -> tuple[dict[str, Inventory | None],
                                                                                  dict[str, Fabric | None]]:
        """Each host's GPU inventory and, where a backend runs, its fabric: one remote command a host with a GPU
        service (its inventory reads the fabric too), one for the fabric alone on a host of backends without."""
        backends = {place for place in hosts if self.sessions[place].sysfs
                    and any(r.cfg.role in BACKEND_ROLES for r in self.on_place[place])}
        with_gpus = set(gpu_hosts(self.deployment))
        read, alone = await asyncio.gather(
            host_hardware(self.deployment, hosts),
            self._fabrics({p: hosts[p] for p in backends if p not in with_gpus} if fabric else {}))
        inventories = {place: inventory for place, (inventory, _) in read.items()}
        fabrics = {place: found for place, (_, found) in read.items() if place in backends} if fabric else {}
        return inventories, fabrics | alone

    async def _fabrics(self, hosts: Mapping[str, Host]) -> dict[str, Fabric | None]:
        """Each host's fabric alone (one read-only command a host, all at once)."""
        found = await asyncio.gather(*(read_fabric(host, self.sessions[place].sysfs or "/sys")
                                       for place, host in hosts.items()))
        return dict(zip(hosts, found, strict=True))

    async def _look_and_compare(self, reachers: Mapping[str, Reacher], *,
                                compare: bool) -> tuple[list[bool], dict[str, ServerCommand], list[Mismatch]]:
        """Every place's look at its services; then (``compare``) the servers' command lines as they will run (their
        installed units, as the looks read them, else their launch blocks), and each prefill against each decode it
        is paired with and the servers of each host against each other."""
        results = await asyncio.gather(*(self._check_place(p, reachers[p]) for p in self.sessions))
        if not compare:
            return results, {}, []
        runs, commands = self._runs, self._commands()
        return results, commands, [*self._pair_mismatches(runs, commands), *self._host_mismatches(runs, commands),
                                   *self._side_channel_mismatches(commands)]

    def _commands(self) -> dict[str, ServerCommand]:
        """Each server's command line as it will run."""
        return {name: command for name, run in self._runs.items() if run.cfg.role in BACKEND_ROLES
                and (command := run.planned or run.serving.planned_command(self.deployment, run.cfg))}

    def _judge_commands(self, commands: Mapping[str, ServerCommand], among: list[Mismatch],
                        inventories: Mapping[str, Inventory | None], fabrics: Mapping[str, Fabric | None]) -> bool:
        """The servers' mismatches among themselves (``among``) and each against its host's fabric, told: a
        refusal fails the services it names before anything starts, unless forced; with ``strict: true`` a warning
        refuses too."""
        runs = self._runs
        mismatches = [*among, *self._fabric_mismatches(runs, commands, inventories, fabrics)]
        starting = self._starting()
        ok = True
        for found in mismatches:
            service = runs[found.services[0]]
            self.emit(finding(found, service, self.elapsed()))
            if not refuses(found, self.deployment) or not starting.intersection(found.services):
                continue    # a warning, or about servers this command leaves as they run: told only
            if self.force:
                self.emit(overridden(found, service.name, self.elapsed()))
                continue
            for name in starting.intersection(found.services):
                if runs[name].state is S.PENDING:
                    runs[name].refuse(found.text.removeprefix(f"{name}: "))
            ok = False
        return ok

    def _pairs(self, among: Container[str]) -> list[tuple[str, str]]:
        """Every prefill × decode of ``among`` that share a router, once."""
        runs = self._runs
        pairs: dict[tuple[str, str], None] = {}
        for router in (r for r in runs.values() if r.cfg.is_router):
            behind = [n for n in router.cfg.after if n in among]
            pairs |= dict.fromkeys((p, d) for p in behind for d in behind
                                   if runs[p].cfg.role == "prefill" and runs[d].cfg.role == "decode")
        return list(pairs)

    def _pair_mismatches(self, runs: Mapping[str, ServiceRun], commands: Mapping[str, ServerCommand]) -> list[Mismatch]:
        """Every prefill × decode that share a router, compared once."""
        return [m for p, d in self._pairs(commands)
                for m in runs[p].serving.pair_mismatches((p, commands[p]), (d, commands[d]))]

    def _host_mismatches(self, runs: Mapping[str, ServiceRun], commands: Mapping[str, ServerCommand]) -> list[Mismatch]:
        """The servers of each place that is one machine (Slurm places a job on a node of its own choosing: its
        ports and GPUs are not compared here)."""
        shared = [[r for r in self.on_place[place] if r.name in commands]
                  for place, session in self.sessions.items() if session.one_machine]
        return [m for servers in shared if servers
                for m in servers[0].serving.host_mismatches([(r.cfg, commands[r.name]) for r in servers])]

    def _side_channel_mismatches(self, commands: Mapping[str, ServerCommand]) -> list[Mismatch]:
        """Each vLLM NIXL server's side channel against the other ports of its place, where the place is one
        machine (two servers given one side-channel port are the engine's own host check)."""
        return side_channel_mismatches(self.deployment, [[(r.cfg, commands.get(r.name)) for r in self.on_place[place]]
                                                         for place, session in self.sessions.items()
                                                         if session.one_machine])

    def _peer_places(self) -> dict[str, set[str]]:
        """Each server in a pair (by its rank 0's name): the hosts of the servers it moves KV with (every node's of a
        server over several nodes). A router's prefills each move KV with all its decodes."""
        runs = self._runs

        def places(name: str) -> set[str]:
            return {runs[rank].cfg.host for rank in self.deployment.ranks_of(name) if rank in runs}

        peers: dict[str, set[str]] = {}
        for router in (r for r in runs.values() if r.cfg.is_router):
            sides = {role: [n for n in router.cfg.after if n in runs and runs[n].cfg.role == role]
                     for role in ("prefill", "decode")}
            if not sides["prefill"] or not sides["decode"]:
                continue
            reach = {role: set().union(*(places(n) for n in names)) for role, names in sides.items()}
            for role, other in (("prefill", "decode"), ("decode", "prefill")):
                for name in sides[role]:
                    peers.setdefault(name, set()).update(reach[other])
        return peers

    async def _pair_paths(self, commands: Mapping[str, ServerCommand],
                          inventories: Mapping[str, Inventory | None]) -> list[Mismatch]:
        """Each pair on one machine that moves KV with NIXL between GPUs on different NUMA nodes: warned of, unless
        its host's ``nvidia-smi topo -m`` (read only then, once a host) says NVLink joins them."""
        runs = self._runs
        servers: dict[str, Server | None] = {}

        def server(name: str) -> Server | None:
            if name not in servers:
                servers[name] = self._server(name, commands[name], inventories)
            return servers[name]

        apart: list[tuple[Server, Server]] = []
        for p, d in self._pairs(commands):
            pc, dc = runs[p].cfg, runs[d].cfg
            session = self.sessions.get(pc.host)
            if session is None or not session.one_machine or dc.host != pc.host or pc.nnodes > 1 or dc.nnodes > 1:
                continue
            prefill, decode = server(p), server(d)
            if prefill is not None and decode is not None and prefill.path.backend == decode.path.backend == NIXL \
                    and numa_apart(prefill, decode):
                apart.append((prefill, decode))
        hosts = list(dict.fromkeys(prefill.host for prefill, _ in apart))
        read = await asyncio.gather(*(read_links(self.sessions[h].host, self.sessions[h].nvidia_smi or ("nvidia-smi",))
                                      for h in hosts))
        links = dict(zip(hosts, read, strict=True))
        return [m for prefill, decode in apart for m in pair_numa_mismatches(prefill, decode, links[prefill.host])]

    def _server(self, name: str, command: ServerCommand, inventories: Mapping[str, Inventory | None],
                peers_elsewhere: bool = True) -> Server | None:
        """A server as the fabric check judges it (None: its command line does not say how it moves KV)."""
        run = self._runs[name]
        if (path := run.serving.transfer_path(command)) is None:
            return None
        inventory = inventories.get(run.cfg.host)
        numa = {gpu: inventory.numa.get(gpu) if inventory else None for gpu in run.cfg.gpus}
        return Server(name, run.cfg.host, path, command.source, numa, run.memory_lock, nixl_ucx(path, command),
                      peers_elsewhere)

    def _fabric_mismatches(self, runs: Mapping[str, ServiceRun], commands: Mapping[str, ServerCommand],
                           inventories: Mapping[str, Inventory | None],
                           fabrics: Mapping[str, Fabric | None]) -> list[Mismatch]:
        """Each server that moves KV over RDMA, or with NIXL through UCX, against its host's fabric; a host whose
        fabric could not be read is said once and not judged."""
        found: list[Mismatch] = []
        unread: set[str] = set()
        peers = self._peer_places()
        for name, command in commands.items():
            run = runs[name]
            if run.cfg.host not in fabrics:
                continue
            places = peers.get(run.cfg.server)
            server = self._server(name, command, inventories, places is None or bool(places - {run.cfg.host}))
            if server is None or not (server.path.rdma or server.ucx is not None):
                continue
            fabric = fabrics[run.cfg.host]
            if fabric is None:
                unread.add(run.cfg.host)
                continue
            found += fabric_mismatches(server, fabric)
        for host in sorted(unread):
            self.emit(Notice("info", f"fabric not checked on {host}: its sysfs ({self.sessions[host].sysfs}) "
                                     f"could not be read", None, self.elapsed()))
        return found

    async def _check_place(self, place: str, reacher: Reacher) -> bool:
        try:
            return await self.sessions[place].preflight(self.on_place[place], reacher,
                                                        starting=self.verb in (Verb.UP, Verb.RESTART))
        finally:
            self.reached(place)

    def _hosts(self) -> dict:
        return {name: session.host for name, session in self.sessions.items()}

    async def _judge_gpus(self, inventories: dict[str, Inventory | None], *, sample: bool) -> bool:
        """The GPU inventories' findings told; errors fail their service. Then one long-running sampler per host
        keeps the GPU chips live."""
        ok = True
        judging = self.verb in (Verb.UP, Verb.RESTART)   # status and down start nothing: findings only told
        findings = []
        if self.verb is not Verb.DOWN:
            findings = preflight_findings(self.deployment, inventories, own=self._own_processes(inventories))
        runs = self._runs
        for finding in findings:
            self.emit(Notice(finding.level, finding.text, finding.service, self.elapsed()))
            run = runs.get(finding.service or "")
            if judging and finding.level == "error" and run is not None and run.state is S.PENDING:
                run.transition(S.FAILED, finding.text.removeprefix(f"{run.name}: "))
                ok = False
        for name, inventory in inventories.items():
            if sample and inventory is not None:
                argv = sampler_argv(self.sessions[name].nvidia_smi or ("nvidia-smi",))
                sampler = GpuSampler(self.sessions[name].host, name, argv, self.emit, self.elapsed, inventory=inventory)
                self.samplers.append(asyncio.create_task(sampler.run(), name=f"gpus {name}"))
        return ok

    def _own_processes(self, inventories: dict[str, Inventory | None]) -> dict[str, frozenset[int]]:
        """Each running unit's own processes (its main PID and what descends from it, from the process table its
        host's inventory read) on hosts where a GPU is held: a deployment that runs already does not find its own
        GPUs busy."""
        own: dict[str, frozenset[int]] = {}
        for host_name, found in inventories.items():
            running = [r for r in self.on_place[host_name] if r.running and r.main_pid]
            if found and found.apps and found.processes is not None:
                own |= {r.name: process_tree(found.processes, r.main_pid) for r in running}
        return own
