"""Every prefill × decode pair proven directly, bypassing the router: its serving engine's PD request.

The router may send the smoke request through one healthy pair while another
can never transfer (a decode that cannot reach one prefill's bootstrap
server, a prefill with stale transfer state). So after the router is proven,
each pair gets one request of its own, sent as its serving engine's router sends it
(:meth:`pdtui.servers.ServingEngine.pair`: SGLang's to both sides at once, servers/sglang/pd_request.py), the
smoke's prompt so that real KV pages move, judged by the decode's tokens
(generation.py); a prefill that answers an error fails its pairs too.
Bounded: pairs run side by side up to :data:`AT_ONCE`, each within
:data:`PAIR_TIMEOUT`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import urlsplit

from pdtui.config import DEFAULT_BOOTSTRAP_PORT
from pdtui.engine.checks.generation import MAX_TOKENS, SMOKE_PROMPT, error_message, judge
from pdtui.engine.checks.workers import Backend, worker_matches
from pdtui.engine.events import PairResult
from pdtui.engine.tracebacks import transfer_exception
from pdtui.hosts.http import HttpResult
from pdtui.servers import PairAnswers, PairSend
from pdtui.vocabulary.checks import Check, Probed, reported_port

AT_ONCE = 8              # pairs proven side by side
PAIR_TIMEOUT = 30.0      # seconds for one pair's request (a transfer that never completes waits much longer)
NAME = "pairs"


class PairRequest(Protocol):
    """The serving engine's pair request (:meth:`pdtui.servers.ServingEngine.pair`)."""

    def __call__(self, send: PairSend, prompt: str, *, max_new_tokens: int,
                 bootstrap: tuple[str, int]) -> Awaitable[PairAnswers]: ...


class TransferError(Protocol):
    """A KV transfer error one of ``services`` logged since a moment of the run's clock (one that names
    ``needle``), quoted; ``wait``: give the line the settle time to come through the journal."""

    def __call__(self, services: Collection[str], since: float, wait: bool, needle: str = "") -> Awaitable[str | None]:
        ...


@dataclass(frozen=True, slots=True)
class PairEnds:
    """One pair as its request reaches it: both servers, and where the decode finds the prefill's bootstrap
    server (as the router names it)."""

    prefill: Probed
    decode: Probed
    bootstrap_host: str
    bootstrap_port: int


async def prove_pairs(pairs: Sequence[PairEnds], request: PairRequest, *, clock: Callable[[], float],
                      transfer_error: TransferError | None = None, prompt: str = SMOKE_PROMPT
                      ) -> tuple[PairResult, ...]:
    """One PD request per pair, up to :data:`AT_ONCE` at a time; the results in the pairs' order."""
    turns = asyncio.Semaphore(AT_ONCE)

    async def one(pair: PairEnds) -> PairResult:
        async with turns:
            return await prove_pair(pair, request, clock=clock, transfer_error=transfer_error, prompt=prompt)

    return tuple(await asyncio.gather(*(one(pair) for pair in pairs)))


async def prove_pair(pair: PairEnds, request: PairRequest, *, clock: Callable[[], float],
                     transfer_error: TransferError | None = None, prompt: str = SMOKE_PROMPT) -> PairResult:
    prefill, decode = pair.prefill, pair.decode

    def send(side: str, path: str, body: dict[str, Any] | None = None) -> Awaitable[HttpResult]:
        return _send(prefill if side == "prefill" else decode, path, body)

    started = clock()
    answers = await request(send, prompt, max_new_tokens=MAX_TOKENS,
                            bootstrap=(pair.bootstrap_host, pair.bootstrap_port))
    prefilled, decoded = answers.prefilled, answers.decoded
    if decoded is None:
        return PairResult(prefill.cfg.name, decode.cfg.name, False,
                          answers.failure or f"{prefill.cfg.name} answered {prefilled.describe()}", prefilled.latency)
    verdict = judge(decoded)
    names = (prefill.cfg.name, decode.cfg.name)
    failed = not (verdict.ok and prefilled.ok)
    # pairs run side by side: only a line that names this request (SGLang: its room) is this pair's
    quoted = await transfer_error(names, started, failed, answers.needle) if transfer_error else None

    def result(ok: bool, detail: str) -> PairResult:
        return PairResult(prefill.cfg.name, decode.cfg.name, ok, detail, decoded.latency)

    if quoted is None and answers.transfer_mark is not None:
        mark = answers.transfer_mark
        quoted = _transfer_answer(decode.cfg.name, decoded, mark) or _transfer_answer(prefill.cfg.name, prefilled, mark)
    if quoted:
        return result(False, f"KV transfer failed: {quoted}")
    if not verdict.ok:
        return result(False, verdict.detail)
    if not prefilled.ok:
        return result(False, f"{prefill.cfg.name} answered {prefilled.describe()}")
    return result(True, verdict.detail)


def _transfer_answer(service: str, answer: HttpResult, mark: str) -> str | None:
    """A transfer failure as the server answered it (its error holds ``mark``: SGLang's names a room), when its
    log line has not come through the journal in time: the same words."""
    said = error_message(answer, limit=None) if not answer.ok else None
    return f"{service}: {transfer_exception(said)}" if said and mark in said else None


async def _send(end: Probed, path: str, body: dict | None) -> HttpResult:
    assert end.cfg.port is not None
    return await end.prober.request("GET" if body is None else "POST", end.cfg.port, path, body=body,
                                    timeout=PAIR_TIMEOUT, address=end.address)


def pairs_check(results: Sequence[PairResult]) -> Check:
    """The pairs as one check: every pair, or the ones that failed, named ``decode ✗ prefill: why``."""
    failed = [r for r in results if not r.ok]
    if not failed:
        return Check(NAME, True, f"{len(results)} of {len(results)} pairs proven by their tokens",
                     max((r.latency for r in results if r.latency is not None), default=None))
    return Check(NAME, False, "; ".join(f"{r.decode} ✗ {r.prefill}: {r.detail}" for r in failed))


class PairProbe:
    """A router's pairs: which prefills and decodes it pairs, each pair's latest result.

    During a bring-up each round proves the pairs not yet proven; three rounds
    that leave one unproven are final (a pair that cannot transfer is not
    warming up). On demand (:meth:`prove_all`) every pair is proven again.
    """

    def __init__(self, prefills: Sequence[tuple[Probed, Backend]], decodes: Sequence[Probed], request: PairRequest, *,
                 clock: Callable[[], float], transfer_error: TransferError | None = None,
                 prompt: str = SMOKE_PROMPT) -> None:
        self.prefills = list(prefills)
        self.prompt = prompt
        self.decodes = list(decodes)
        self.request = request
        self.clock = clock
        self.transfer_error = transfer_error
        self.results: dict[tuple[str, str], PairResult] = {}
        self.failed_rounds = 0

    @property
    def matrix(self) -> tuple[PairResult, ...]:
        """The latest result of every pair proven so far, prefill by prefill."""
        return tuple(self.results[key] for key in self._keys() if key in self.results)

    async def step(self, workers: Sequence[dict]) -> Check:
        """A bring-up's round: the pairs not proven yet, against the router's ``/workers`` list."""
        todo = [key for key in self._keys() if not (key in self.results and self.results[key].ok)]
        await self._prove(todo, workers)
        check = pairs_check(self.matrix)
        if check.ok:
            return check
        self.failed_rounds += 1
        return replace(check, final=self.failed_rounds >= 3)

    async def prove_all(self, workers: Sequence[dict]) -> Check:
        """Every pair proven again (``status --pairs``, the TUI's key)."""
        await self._prove(list(self._keys()), workers)
        return pairs_check(self.matrix)

    def _keys(self) -> list[tuple[str, str]]:
        return [(p.cfg.name, d.cfg.name) for p, _ in self.prefills for d in self.decodes]

    async def _prove(self, keys: Sequence[tuple[str, str]], workers: Sequence[dict]) -> None:
        prefills = {p.cfg.name: (p, _bootstrap(p, backend, workers)) for p, backend in self.prefills}
        decodes = {d.cfg.name: d for d in self.decodes}
        ends = [PairEnds(prefills[p][0], decodes[d], *prefills[p][1]) for p, d in keys]
        for result in await prove_pairs(ends, self.request, clock=self.clock, transfer_error=self.transfer_error,
                                        prompt=self.prompt):
            self.results[(result.prefill, result.decode)] = result


def _bootstrap(prefill: Probed, backend: Backend, workers: Sequence[dict]) -> tuple[str, int]:
    """Where a decode finds this prefill's bootstrap server: the host of its URL and the bootstrap port as the
    router lists them (what the router itself sends), else its own address and the port its checks learned."""
    port = prefill.learned.bootstrap_port or prefill.cfg.bootstrap_port or DEFAULT_BOOTSTRAP_PORT
    for worker in workers:
        url = str(worker.get("url", ""))
        if worker_matches(url, backend):
            return urlsplit(url).hostname or prefill.address, reported_port(worker.get("bootstrap_port")) or port
    return prefill.address, port
