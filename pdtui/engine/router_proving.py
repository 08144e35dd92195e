"""A router's proving: its end-to-end probe, its pairs and its canary, for one start of its run.

A router's run (service_run.py) asks this object for its verdicts; it
builds the probe (engine/checks/router.py) from the router's backends as the
config and their runs know them, reads the KV transfer series (of the side that counts them) and
quotes a backend's transfer error by the request's room, and tells the faces
what each step found (``ProbeResult``, ``PairMatrix``). One per attempt: a
restarted router proves itself afresh (the model, the smoke failures, the
pairs forgotten).
"""

from __future__ import annotations

import asyncio
import shlex
import urllib.parse
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from pdtui.config import BACKEND_ROLES
from pdtui.engine.checks.generation import smoke_prompt
from pdtui.engine.checks.kv_transfer import KvReading
from pdtui.engine.checks.pairs import NAME as PAIRS
from pdtui.engine.checks.pairs import PairProbe
from pdtui.engine.checks.refusal import Refusals
from pdtui.engine.checks.router import RouterProbe
from pdtui.engine.checks.workers import Backend, healthy, worker_matches
from pdtui.engine.events import PairMatrix, PairResult, RoutedWorker, RouterBackends
from pdtui.engine.router_workers import RouterApiError, RouterWorker, RouterWorkers, workers_in
from pdtui.engine.states import SERVING_STATES
from pdtui.engine.tracebacks import transfer_exception
from pdtui.hosts.base import Host
from pdtui.hosts.http import HttpResult
from pdtui.vocabulary.checks import Check
from pdtui.vocabulary.figures import KvTotals

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

ADD_AFTER = 10.0    # seconds a serving backend goes unlisted by a router it started with before pdtui adds it


class RouterProving:
    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        w = run.w
        assert run.cfg.port is not None      # the config requires a router's port
        backends = self._backends()
        prompt = smoke_prompt(self._page(backends))
        self.probe = RouterProbe(run.prober, run.cfg.port, backends, smoke=w.smoke, prompt=prompt,
                                 transfer_error=self.transfer_error_since, kv_meter=self._kv_reading,
                                 pairs=self._pair_probe(backends, prompt), settle=w.timing.settle, clock=w.clock,
                                 address=run.address, key_env=run.cfg.api_key_env,
                                 refusals=Refusals(run.prober, self._url_of, run.lines.worker_lines,
                                                   key_env=run.cfg.api_key_env, clock=w.clock))
        self._may_lack = True           # a look at its workers for configured backends it lacks is due
        self._missing_since: dict[str, float] = {}     # backends that serve, not listed by it since then
        self._added: set[str] = set()                   # backends added through its worker API, still unlisted
        self._told_unknown: set[str] = set()            # workers it routes to that the config does not name, told
        self._told_backends: tuple = ((), ())           # its workers and what it lacked, as last told
        self._told_refusal = False                      # its worker API refused an addition: told once

    @property
    def generated(self) -> bool:
        """Whether its probe has sent a generation through it in this start (its next look may send another)."""
        return self.probe.generations > 0

    async def verdict(self, host: Host) -> bool | Check | None:
        """The probe's steps, each told: True when all hold, the failure when it is final, else None."""
        listing = await self.add_missing() if self._may_lack else None
        failed, looked = None, False
        async for check in self.probe.steps(host, listing):
            self.run.tell.probe_result(check)
            if check.name == PAIRS:
                self._tell_pairs()
            looked = True
            if not check.ok and (failed is None or check.final):
                failed = check           # the first failure, unless a later one is final (the pairs name the cause)
            if check.name == "workers":
                self._may_lack = not check.ok
                self._tell_backends()
        if failed is None:
            return looked or None
        return failed if failed.final else None

    def _tell_backends(self) -> None:
        """What it routes to against the config, told when that changes; a worker the config does not name is
        also warned about once, with the command that drops it."""
        run = self.run
        order = {backend.service: n for n, backend in enumerate(self.probe.backends)}
        workers = tuple(sorted((self._routed(worker) for worker in self.probe.listed),     # the config's order
                               key=lambda w: (order.get(w.service or "", len(order)), w.url)))
        named = {worker.service for worker in workers}
        lacking = tuple(backend.service for backend in self.probe.backends if backend.service not in named)
        if (workers, lacking) == self._told_backends:
            return
        self._told_backends = (workers, lacking)
        run.w.emit(RouterBackends(run.name, workers, lacking, run.w.elapsed()))
        for worker in workers:
            if worker.service is None and worker.url not in self._told_unknown:
                self._told_unknown.add(worker.url)
                run.tell.notice("warning", f"{run.name}: it also routes to {worker.url} ({worker.role or 'a worker'}), "
                                           f"which the config does not name; to drop it: {worker.drop}")

    def _routed(self, worker: dict) -> RoutedWorker:
        """A listed worker, named by the configured backend it is; one the config does not name with its drop."""
        url, role = str(worker.get("url", "")), str(worker.get("worker_type", ""))
        service = next((b.service for b in self.probe.backends if worker_matches(url, b)), None)
        drop = ""
        if service is None:
            worker_id = str(worker.get("id", ""))
            drop = (drop_command(self.run.address, self.run.cfg.port, worker_id, self.run.cfg.api_key_env)
                    if worker_id else "its worker API's DELETE /workers/{id}")
        return RoutedWorker(url, role, healthy(worker), service, drop)

    async def add_missing(self) -> HttpResult | None:
        """Its configured backends that serve but that it does not list, added through its worker API: its unit
        lacks them (added to the config since it started), or a ``down`` of them took them out. A router found
        running is made whole at once; one starting registers its unit's backends itself, in the background, so
        a backend is added only once it has been missing for :data:`ADD_AFTER`, and once while it is missing (a
        router that does not take it then would not take it the next time: the workers check says why). Looked at
        once per start, and again after a look that found one missing. Its ``/workers`` answer when it added none:
        the probe's workers step judges that one rather than asking again."""
        run = self.run
        assert run.cfg.port is not None
        self._may_lack = False
        api = RouterWorkers(run.name, run.prober, run.cfg.port, run.address, clock=run.w.clock,
                            key_env=run.cfg.api_key_env)
        now = run.w.clock()
        added = False
        try:
            listing = await api.listing()
            listed = workers_in(listing)
            for backend in self.probe.backends:
                peer = run.w.peers[backend.service]
                url = peer.url_for(run.cfg) if peer.state in SERVING_STATES else None
                if url is None or any(worker_matches(worker.url, backend) for worker in listed):
                    self._missing_since.pop(backend.service, None)
                    self._added.discard(backend.service)
                    continue
                if backend.service in self._added:
                    continue        # added once while it is missing: the workers check says why it still is
                since = self._missing_since.setdefault(backend.service, now)
                if not run.attempt.attached and now - since < ADD_AFTER:
                    self._may_lack = True       # the router may still be registering it: look again
                    continue
                bootstrap = peer.learned.bootstrap_port or peer.cfg.bootstrap_port
                await api.add(RouterWorker(url, url, backend.role, bootstrap, healthy=False, draining=False))
                added = True
                self._added.add(backend.service)
                run.tell.notice("info", f"{run.name}: {backend.service} is not among its workers (its unit does not name "
                                        f"it): added through its worker API")
        except RouterApiError as exc:
            if exc.status is None or exc.status == 401:
                self._may_lack = True    # not answering yet (its probe waits for it), or its probe names the key
            elif not self._told_refusal:
                self._told_refusal = True
                run.tell.notice("warning", f"{run.name}: its missing backends could not be added: {exc}")
            return None
        return None if added else listing

    async def canary(self) -> Check:
        return await self.probe.canary()

    async def prove_pairs(self) -> None:
        """Prove every pair behind the router again, now (a router without pairs to prove says so)."""
        check = await self.probe.prove_pairs()
        if check is None:
            self.run.tell.notice("info", f"{self.run.name}: no prefill × decode pairs to prove")
            return
        self.run.tell.probe_result(check, again=True)
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

    def _url_of(self, backend: Backend) -> str | None:
        """The URL the router was given for ``backend`` (None: not known yet, a job not placed)."""
        return self.run.w.peers[backend.service].url_for(self.run.cfg)

    def _page(self, backends: list[Backend]) -> int | None:
        """The largest KV page of its backends, as each runs or will run (None: one of them does not tell)."""
        peers = [self.run.w.peers[backend.service] for backend in backends]
        pages = [peer.serving.page_size(peer.planned, peer.learned.server_info) for peer in peers]
        return None if not pages or None in pages else max(page for page in pages if page is not None)

    def _pair_probe(self, backends: list[Backend], prompt: str) -> PairProbe | None:
        """Its prefill × decode pairs, when they are proven: asked for (``pairs``), or by default when there is
        more than one (a single pair is the smoke's own path)."""
        peers, wanted = self.run.w.peers, self.run.w.pairs
        prefills = [(peers[b.service], b) for b in backends if b.role == "prefill"]
        decodes = [peers[b.service] for b in backends if b.role == "decode"]
        if wanted is False or not prefills or not decodes or (wanted is None and len(prefills) * len(decodes) < 2):
            return None
        return PairProbe(prefills, decodes, self.run.serving.pair, clock=self.run.w.clock,
                         transfer_error=self.transfer_error_since, prompt=prompt)

    async def _kv_reading(self) -> KvReading:
        """The KV transfer series now of each backend whose serving engine counts transfers on its side (None: no
        ``/metrics``): SGLang's prefill observes every transfer it sends and counts those that failed, its
        bootstrap's too; vLLM's decode pulls the KV and counts it. The other side's would only repeat them."""
        counting = [peer for name in self.run.cfg.after
                    if (peer := self.run.w.peers[name]).cfg.role == peer.serving.kv_series_role]
        reading: dict[str, KvTotals | None] = {peer.name: None for peer in counting if not peer.metrics.available}
        if asked := [peer.metrics.kv_totals() for peer in counting if peer.metrics.available]:    # none: no loop turn spent
            reading |= dict(await asyncio.gather(*asked))
        return reading

    async def transfer_error_since(self, services: Collection[str], since: float, wait: bool,
                                   needle: str = "") -> str | None:
        """A KV transfer error one of ``services`` logged since ``since`` (that names ``needle``: a request's
        room), quoted with its service by its exception: the most telling of them (:func:`most_telling`).

        ``wait``: the request failed, and its backend's line may still be on its
        way through the journal (or a Python traceback's end, which holds the
        cause): give it the settle time and a crash's cause time to arrive.
        """
        w = self.run.w
        deadline = w.clock() + (w.timing.settle + w.timing.cause if wait else 0.0)
        while True:
            quote = most_telling({name: w.peers[name].attempt.transfers or () for name in services}, since, needle)
            if quote is not None or w.clock() >= deadline:
                return quote
            await asyncio.sleep(0.02)


def most_telling(transfers: Mapping[str, Iterable[tuple[float, int, str]]], since: float, needle: str = "") -> str | None:
    """The KV transfer error lines of each service (when, the rank of their signature, the line) since ``since``
    that name ``needle``: the most telling one quoted with its service by its exception; a cause (``NIXL
    compatibility hash mismatch``) above the scheduler's ``Failing 1 request(s) due to KV load failure`` logged
    right after it, whichever the tail handed over last; the latest among equals. None when there is none."""
    found = [(rank, at, name, line) for name, lines in transfers.items()
             for at, rank, line in lines if at >= since and needle in line]
    if not found:
        return None
    _, _, name, line = max(found, key=lambda seen: seen[:2])
    return f"{name}: {transfer_exception(line)}"


def drop_command(address: str, port: int | None, worker_id: str, api_key_env: str | None) -> str:
    """The shell command that takes a worker out of a router, for the user to paste.

    The worker's id is the router's word, not pdtui's: it is percent-encoded into the URL and the URL quoted for the
    shell, so whatever the router answers stays one argument of curl. The API key is named by its variable (an
    identifier the config checked), never written out."""
    auth = f'-H "Authorization: Bearer ${api_key_env}" ' if api_key_env else ""
    url = f"http://{address}:{port}/workers/{urllib.parse.quote(worker_id, safe='')}"
    return f"curl -X DELETE {auth}{shlex.quote(url)}"
