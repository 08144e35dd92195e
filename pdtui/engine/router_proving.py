"""A router's proving: its end-to-end probe, its pairs and its canary, for one start of its run.

A router's run (service_run.py) asks this object for its verdicts; it
builds the probe (engine/checks/router.py) from the router's backends as the
config and their runs know them, reads the prefills' KV transfer series and
quotes a backend's transfer error by the request's room, and tells the faces
what each step found (``ProbeResult``, ``PairMatrix``). One per attempt: a
restarted router proves itself afresh (the model, the smoke failures, the
pairs forgotten).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import TYPE_CHECKING

from pdtui.engine.checks import Check
from pdtui.engine.checks.kv_transfer import KvReading
from pdtui.engine.checks.pairs import NAME as PAIRS
from pdtui.engine.checks.pairs import PairProbe
from pdtui.engine.checks.router import RouterProbe
from pdtui.engine.checks.workers import Backend
from pdtui.engine.events import PairMatrix, PairResult
from pdtui.engine.tracebacks import transfer_exception
from pdtui.hosts.base import Host

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

BACKEND_ROLES = ("prefill", "decode")


class RouterProving:
    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        w = run.w
        assert run.cfg.port is not None      # the config requires a router's port
        backends = self._backends()
        self.probe = RouterProbe(run.session.prober, run.cfg.port, backends, smoke=w.smoke,
                                 transfer_error=self.transfer_error_since, kv_meter=self._kv_reading,
                                 pairs=self._pair_probe(backends), settle=w.timing.settle, clock=w.clock,
                                 address=run.address)

    async def verdict(self, host: Host) -> bool | Check | None:
        """The probe's steps, each told: True when all hold, the failure when it is final, else None."""
        failed, looked = None, False
        async for check in self.probe.steps(host):
            self.run.probe_result(check)
            if check.name == PAIRS:
                self._tell_pairs()
            looked = True
            if not check.ok and (failed is None or check.final):
                failed = check           # the first failure, unless a later one is final (the pairs name the cause)
        if failed is None:
            return looked or None
        return failed if failed.final else None

    async def canary(self) -> Check:
        return await self.probe.canary()

    async def prove_pairs(self) -> None:
        """Prove every pair behind the router again, now (a router without pairs to prove says so)."""
        check = await self.probe.prove_pairs()
        if check is None:
            self.run.notice("info", f"{self.run.name}: no prefill × decode pairs to prove")
            return
        self.run.probe_result(check, again=True)
        self._tell_pairs()

    async def prove_pairs_with(self, service: str) -> list[PairResult] | None:
        """Prove every pair behind the router again; the ones ``service`` is in (None: no pairs are proven here)."""
        if await self.probe.prove_pairs() is None or self.probe.pairs is None:
            return None
        self._tell_pairs()
        return [p for p in self.probe.pairs.matrix if service in (p.prefill, p.decode)]

    def _tell_pairs(self) -> None:
        if self.probe.pairs is not None:
            self.run.w.emit(PairMatrix(self.run.name, self.probe.pairs.matrix, self.run.w.elapsed()))

    def _backends(self) -> list[Backend]:
        """The router's backends as its workers' URLs should name them."""
        run, backends = self.run, []
        for name in run.cfg.after:
            peer = run.w.peers[name]
            if peer.cfg.role in BACKEND_ROLES and peer.cfg.port:
                backends.append(Backend(name, peer.cfg.role, peer.cfg.port, peer.names_for(run.cfg)))
        return backends

    def _pair_probe(self, backends: list[Backend]) -> PairProbe | None:
        """Its prefill × decode pairs, when they are proven: asked for (``pairs``), or by default when there is
        more than one (a single pair is the smoke's own path)."""
        peers, wanted = self.run.w.peers, self.run.w.pairs
        prefills = [(peers[b.service], b) for b in backends if b.role == "prefill"]
        decodes = [peers[b.service] for b in backends if b.role == "decode"]
        if wanted is False or not prefills or not decodes or (wanted is None and len(prefills) * len(decodes) < 2):
            return None
        return PairProbe(prefills, decodes, self.run.serving.pair_request, clock=self.run.w.clock,
                         transfer_error=self.transfer_error_since)

    async def _kv_reading(self) -> KvReading:
        """Each prefill's KV transfer series now (None: no ``/metrics``). A prefill observes every transfer it
        sends and counts those that failed, its bootstrap's too: its decodes' series would only repeat them."""
        peers = [self.run.w.peers[name] for name in self.run.cfg.after]
        return dict(await asyncio.gather(*(peer.kv_totals() for peer in peers if peer.cfg.role == "prefill")))

    async def transfer_error_since(self, services: Collection[str], since: float, wait: bool,
                                   needle: str = "") -> str | None:
        """A KV transfer error one of ``services`` logged since ``since`` (that names ``needle``: a request's
        room), quoted with its service by its exception.

        ``wait``: the request failed, and its backend's line may still be on its
        way through the journal: give it the settle time to arrive.
        """
        w = self.run.w
        deadline = w.clock() + (w.timing.settle if wait else 0.0)
        while True:
            for name in services:
                for at, line in reversed(w.peers[name].attempt.transfers):
                    if at < since:
                        break
                    if needle in line:
                        return f"{name}: {transfer_exception(line)}"
            if w.clock() >= deadline:
                return None
            await asyncio.sleep(0.02)
