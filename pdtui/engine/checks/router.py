"""The router's end-to-end probe: each step a check, in order, stopping at the first that does not hold.

Port accepting, ``/readiness`` (``/health`` on routers that have no
``/readiness``), every configured backend healthy in ``/workers`` (looked at
too when ``/readiness`` says not ready: the backends it lacks are why, each
named with the reason the router does not take it, checks/refusal.py), a model in
``/v1/models``, and one generation for the model listed through the prefill ->
decode path (smg routes by the model; another name is 503), proven by its
tokens (checks/generation.py) and, where the servers export SGLang's KV
transfer series, by those moving (checks/kv_transfer.py). A router whose
``/workers`` answers 401 fails the probe for good: it wants an API key pdtui was
not given (the router's ``api_key_env``), or refused the one sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from pdtui.engine.checks.generation import CANARY_PROMPT, SMOKE_PROMPT, Verdict, judge, request_body
from pdtui.engine.checks.kv_transfer import KvMeter, KvReading, kv_seen
from pdtui.engine.checks.pairs import NAME as PAIRS
from pdtui.engine.checks.pairs import PairProbe, TransferError, pairs_check
from pdtui.engine.checks.refusal import Refusals
from pdtui.engine.checks.workers import Backend, check_workers, key_refused, listed_workers
from pdtui.hosts.base import LOOPBACK_ADDRESS, Host
from pdtui.hosts.http import HttpProber, HttpResult
from pdtui.vocabulary.checks import Check, tcp_check

GENERATION_TIMEOUT = 30.0
KV_REREAD = 0.1        # seconds between two readings of the KV series after the smoke
KV = "kv"              # the check that the smoke's KV moved, by the servers' own series


class RouterProbe:
    """The router's end-to-end probe, step by step.

    ``transfer_error`` tells whether a backend logged a KV transfer error since
    a moment (of ``clock``): such a line during the smoke request fails that
    step, quoted, whatever the router answered. ``kv_meter`` reads the
    KV transfer series of the side that counts them (SGLang's prefills, vLLM's decodes), before and after the
    smoke request.
    ``pairs``, when given, proves each prefill × decode pair after the smoke.
    ``refusals``, when given, finds why the router does not take a backend it lacks.
    ``prompt``: the smoke's (and each pair's), long enough to move KV pages over the pair.
    """

    def __init__(self, prober: HttpProber, port: int, backends: Sequence[Backend], *, smoke: bool = True,
                 transfer_error: TransferError | None = None, kv_meter: KvMeter | None = None,
                 pairs: PairProbe | None = None, settle: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 address: str = LOOPBACK_ADDRESS, key_env: str | None = None,
                 refusals: Refusals | None = None, prompt: str = SMOKE_PROMPT) -> None:
        self.prober = prober
        self.refusals = refusals
        self.key_env = key_env      # the environment variable whose key the prober sends, if any
        self.port = port
        self.address = address      # where the router listens, as its host sees it (a job: its node's address)
        self.backends = list(backends)
        self.smoke = smoke
        self.prompt = prompt        # the smoke's (checks/generation.py: sized to the backends' KV pages)
        self.smoke_failures = 0
        self.generations = 0        # generations sent through it (the smoke, the canary)
        self.transfer_error = transfer_error
        self.kv_meter = kv_meter
        self.pairs = pairs
        self.settle = settle
        self.clock = clock
        self.listed: list[dict] = []        # the workers the router listed at its last look
        self._model: str | None = None
        self._transfer_quote: str | None = None

    async def steps(self, host: Host, workers: HttpResult | None = None):
        """Yield each step's Check until one fails (that one is yielded last; but for a failed generation, after
        which the pairs are proven once if they never were). ``workers``: the router's ``/workers`` answer of a
        moment ago; the workers step judges it rather than asking again, when every backend was healthy in it."""
        for step in (lambda: self._tcp(host), self._readiness, lambda: self._workers(workers), self._models):
            check = await step()
            yield check
            if not check.ok:
                if check.name == "readiness" and check.detail.startswith("HTTP 503"):
                    yield await self._workers(workers)      # not ready: the backends it lacks, and why
                return
        if not (self.smoke and self._model):
            return
        before = await self.kv_meter() if self.kv_meter else None
        smoke = await self._generated(self._generate(self._model, "smoke", self.prompt))
        yield smoke
        if smoke.ok and before is not None:
            smoke = await self._generated(self._kv_moved(before))
            yield smoke
        if self.pairs is not None:
            pairs = await self._pairs_after(smoke)
            if pairs is not None:
                yield pairs

    async def _pairs_after(self, smoke: Check) -> Check | None:
        """The pairs' check after the smoke's: proven after a smoke that passed; after one that failed, proven once
        (it may have met a broken pair: they name it), and when the smoke's failure is final and a pair failed,
        that pair is the reason told."""
        assert self.pairs is not None
        if smoke.ok or not self.pairs.results:
            pairs = await self.pairs.step(self.listed)
        elif smoke.final:
            pairs = pairs_check(self.pairs.matrix)
        else:
            return None
        return replace(pairs, final=True) if smoke.final and not pairs.ok else pairs

    async def _tcp(self, host: Host) -> Check:
        return await tcp_check(host, self.port, self.address)

    async def _get(self, path: str) -> HttpResult:
        return await self.prober.get(self.port, path, address=self.address)

    async def _readiness(self) -> Check:
        result = await self._get("/readiness")
        if result.status == 404:
            # Older routers have no /readiness; their /health reflects the workers.
            result = await self._get("/health")
            return Check("health", result.ok, result.describe(), result.latency)
        return Check("readiness", result.ok, result.describe(), result.latency)

    async def _workers(self, answered: HttpResult | None = None) -> Check:
        if answered is not None and answered.ok:
            check = self._judge_workers(answered)
            if check.ok:
                return check        # read a moment ago, and it holds: a backend gone since is the next look's
        return self._judge_workers(await self._get("/workers"))

    def _judge_workers(self, result: HttpResult) -> Check:
        if result.status == 401:
            # An API key (--api-key, or control-plane keys) guards /workers; waiting will not change that.
            return Check("workers", False, f"HTTP 401 from /workers: {key_refused(self.key_env)}", result.latency,
                         final=True)
        if not result.ok:
            return Check("workers", False, result.describe(), result.latency)
        self.listed = listed_workers(result.json())
        check = check_workers(self.listed, self.backends, self.refusals.why if self.refusals else None)
        return replace(check, latency=result.latency)

    async def _models(self) -> Check:
        result = await self._get("/v1/models")
        data = result.json() if result.ok else None
        models = [m.get("id") for m in (data or {}).get("data", []) if isinstance(m, dict)] if isinstance(data, dict) else []
        self._model = next((m for m in models if m), None)
        if not self._model:
            return Check("models", False, result.describe() if not result.ok else "no model listed", result.latency)
        return Check("models", True, self._model, result.latency)

    async def _generated(self, step: Awaitable[Check]) -> Check:
        """A generation step's check; failing three times over is not a warm-up hiccup."""
        check = await step
        if check.ok:
            return check
        self.smoke_failures += 1
        return replace(check, final=self.smoke_failures >= 3)

    async def _kv_moved(self, before: KvReading) -> Check:
        """The smoke's tokens came: what the KV transfer series say of it (a server observes a transfer as it
        completes, which may be a moment after the answer: read again for up to ``settle``, unless no counting
        server serves ``/metrics`` at all)."""
        assert self.kv_meter is not None
        deadline = self.clock() + self.settle
        while True:
            after = await self.kv_meter()
            seen = kv_seen(before, after)
            if seen.failed:
                return Check(KV, False, f"{seen.words} during the smoke request")
            # No /metrics anywhere: nothing to wait for (a series appears with its first transfer: those that
            # answer may yet show it)
            if seen.moved or self.clock() >= deadline or all(totals is None for totals in after.values()):
                return Check(KV, True, seen.words)
            await asyncio.sleep(KV_REREAD)

    async def prove_pairs(self) -> Check | None:
        """Every pair proven again, on demand (None: this router has no pairs to prove)."""
        if self.pairs is None:
            return None
        if not self.listed:
            workers = await self._workers()
            if not workers.ok:
                return Check(PAIRS, False, f"{workers.name}: {workers.detail}", workers.latency)
        return await self.pairs.prove_all(self.listed)

    async def canary(self) -> Check:
        """After ready: a tiny generation, judged on its own (a failure is never final)."""
        if self._model is None:
            models = await self._models()
            if not models.ok:
                return Check("canary", False, f"{models.name}: {models.detail}", models.latency)
        assert self._model is not None
        return await self._generate(self._model, "canary", CANARY_PROMPT)

    async def _generate(self, model: str, name: str, prompt: str) -> Check:
        """One chat completion for ``model``, judged by its tokens; a backend's KV transfer error meanwhile
        fails it, quoted."""
        started = self.clock()
        self.generations += 1
        result = await self.prober.request("POST", self.port, "/v1/chat/completions", body=request_body(model, prompt),
                                           timeout=GENERATION_TIMEOUT, address=self.address)
        verdict = judge(result)
        backends = [b.service for b in self.backends]
        quoted = await self.transfer_error(backends, started, not verdict.ok) if self.transfer_error else None
        if quoted:
            self._transfer_quote = quoted
            return Check(name, False, f"KV transfer error during the request: {quoted}", result.latency)
        if not verdict.ok:
            detail = verdict.detail
            if self._transfer_quote:   # the router may stop sending to a backend that failed it before
                detail += f" (after a KV transfer error: {self._transfer_quote})"
            return Check(name, False, detail, result.latency)
        return Check(name, True, _proven(verdict, result), result.latency)


def _proven(verdict: Verdict, result: HttpResult) -> str:
    """What a generation proved, its figures first (a narrow check line keeps those)."""
    prompt = f" for a {verdict.prompt_tokens:,}-token prompt" if verdict.prompt_tokens else ""
    return f"{verdict.counted} in {result.latency * 1000:.0f} ms{prompt} ({verdict.shown})"
