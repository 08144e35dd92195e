"""What a sim worker is busy with: its requests, as a real SGLang server would hold them.

``/metrics`` and the steady-state batch lines read their figures from here, so
what pdtui shows of a serving deployment follows the traffic it really gets.

A request goes through the queues of SGLang's disaggregated scheduler:

- prefill: bootstrap (the handshake with its decode) -> waiting queue ->
  forward (its prompt's new tokens, at ``PREFILL_RATE``) -> inflight (its KV
  cache sent to the decode) -> done. It generates nothing: the decode answers.
- decode: prealloc (the handshake) -> transfer (waiting for the prefill's KV)
  -> waiting queue -> running (one token at a time, tens a second) -> done.

At most ``capacity`` requests run at once (SGLang's ``--max-running-requests``);
the others wait in the queue. The bookkeeping here is thread-safe (the HTTP
server runs a thread per connection); :meth:`Serving.serve` is what a handler
thread runs, sleeping through each phase as the real server would take it.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Generator
from dataclasses import dataclass

MAX_TOTAL_TOKENS = 834615      # the KV cache's tokens (the start-up's max_total_num_tokens)
DEFAULT_CAPACITY = 8           # requests running at once when --max-running-requests is not given
DECODE_RATE = 40.0             # tokens a second of one request on an idle decode (4 tokens: 0.1 s)
SLOWDOWN = 0.25                # ... a full batch runs each request this much slower
JITTER = 0.1                   # ... and each request's rate varies by up to this fraction
PREFILL_RATE = 10000.0         # prompt tokens a second a prefill computes
TRANSFER_RATE = 40000.0        # prompt tokens a second of KV cache sent from prefill to decode
KV_MB_PER_TOKEN = 0.0686       # MB of KV cache a prompt token holds (DeepSeek's MLA: 70,272 bytes, all layers)
HANDSHAKE = 0.002              # seconds of the bootstrap handshake between a prefill and its decode
STALL = 3600.0                 # seconds a stalled transfer holds its request: longer than anyone waits
WINDOW = 2.0                   # seconds of the recent past the generation throughput is measured over
PREFIXES = 1024                # prompt prefixes the prefix cache remembers

# The phases, in order; those that hold KV cache count in the used tokens.
PREFILL_PHASES = ("bootstrap", "queue", "forward", "inflight")
DECODE_PHASES = ("prealloc", "transfer", "queue", "running")
HOLDING_KV = {"prefill": ("forward", "inflight"), "decode": ("transfer", "queue", "running")}
RUNNING = {"prefill": "forward", "decode": "running"}


@dataclass
class Request:
    """One request as the scheduler holds it; times on the monotonic clock."""

    prompt: int                 # prompt tokens
    cached: int                 # ... of them found in the prefix cache (a prefill computes the rest)
    max_tokens: int
    arrived: float
    phase: str
    started: float | None = None    # when it began to run
    rate: float = 0.0               # tokens a second once running on a decode (a prefill generates none)
    ended: float | None = None

    def generated(self, now: float) -> int:
        """Tokens produced by ``now``."""
        if not self.rate or self.started is None:
            return 0
        end = self.ended if self.ended is not None else now
        return min(self.max_tokens, int(max(0.0, end - self.started) * self.rate + 1e-6))   # a token due now is out

    def generating(self, since: float, now: float) -> float:
        """Tokens produced between ``since`` and ``now`` (a share of one where a token was under way)."""
        if not self.rate or self.started is None:
            return 0.0
        end = min(self.ended if self.ended is not None else now, self.started + self.max_tokens / self.rate)
        return max(0.0, end - max(since, self.started)) * self.rate


@dataclass(frozen=True)
class Finished:
    """A request that left the server: what SGLang observes of it in its counters and histograms."""

    prompt: int
    cached: int
    generated: int
    time_to_first_token: float | None   # None: it ended before its first token
    inter_token: float                   # seconds between two of its tokens
    e2e: float


@dataclass(frozen=True)
class Load:
    """The server's figures at one moment, as SGLang's scheduler reports them."""

    running: int
    queued: int
    used_tokens: int
    token_usage: float
    gen_throughput: float
    cache_hit_rate: float
    utilization: float
    prefill_bootstrap: int
    prefill_inflight: int
    decode_prealloc: int
    decode_transfer: int


@dataclass(frozen=True)
class Prefilled:
    """What the prefill computed since its last batch line."""

    seqs: int = 0
    new_tokens: int = 0
    cached_tokens: int = 0


class PrefixCache:
    """A radix cache's effect, coarsely: a prompt prefix seen before is not computed again."""

    def __init__(self, size: int = PREFIXES) -> None:
        self.size = size
        self.seen: OrderedDict[str, None] = OrderedDict()

    def cached(self, prefix: str, tokens: int) -> int:
        """The tokens of ``prefix`` found in the cache (all or none); remember it for the next one."""
        if not prefix:
            return 0
        hit = prefix in self.seen
        self.seen[prefix] = None
        self.seen.move_to_end(prefix)
        if len(self.seen) > self.size:
            self.seen.popitem(last=False)
        return tokens if hit else 0


class Serving:
    """A worker's requests and what they add up to (see the module's docstring)."""

    def __init__(self, role: str, capacity: int = DEFAULT_CAPACITY, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.role = role
        self.capacity = capacity
        self.clock = clock
        self.rng = rng or random.Random()
        self.cond = threading.Condition()
        self.requests: list[Request] = []
        self.recent: deque[Request] = deque()       # finished within the window, oldest first
        self.prefills: deque[tuple[float, int, int]] = deque()   # (when, prompt, cached) of recent prefills
        self.prefix_cache = PrefixCache()
        self.prefilled = Prefilled()
        self.observe: Callable[[Finished], None] | None = None   # set by what records finished requests (/metrics)

    # The bookkeeping: each call is one step of one request, under the lock.

    def arrive(self, prompt: int, max_tokens: int, prefix: str = "", prefix_tokens: int = 0) -> Request:
        """A new request, in its first phase."""
        with self.cond:
            cached = self.prefix_cache.cached(prefix, prefix_tokens) if self.role == "prefill" else 0
            phases = PREFILL_PHASES if self.role == "prefill" else DECODE_PHASES
            request = Request(prompt, min(cached, prompt), max(0, max_tokens), self.clock(), phases[0])
            self.requests.append(request)
            return request

    def move(self, request: Request, phase: str) -> None:
        with self.cond:
            request.phase = phase
            self.cond.notify_all()     # a prefill's forward pass ended: its slot is free for the next

    def try_start(self, request: Request) -> bool:
        """Run ``request`` if a slot is free: True when it now runs."""
        with self.cond:
            running = RUNNING[self.role]
            busy = sum(1 for r in self.requests if r.phase == running)
            if busy >= self.capacity:
                return False
            now = self.clock()
            request.phase, request.started = running, now
            if self.role == "decode":
                jitter = self.rng.uniform(1 - JITTER, 1 + JITTER)
                request.rate = DECODE_RATE * jitter * (1 - SLOWDOWN * busy / self.capacity)
            else:
                self._prefill_started(request, now)
            return True

    def _prefill_started(self, request: Request, now: float) -> None:
        new = request.prompt - request.cached
        done = self.prefilled
        self.prefilled = Prefilled(done.seqs + 1, done.new_tokens + new, done.cached_tokens + request.cached)
        self.prefills.append((now, request.prompt, request.cached))

    def finish(self, request: Request) -> Finished:
        """``request`` leaves the server (answered, or its client went away); what it was, observed."""
        with self.cond:
            now = self.clock()
            request.ended = now
            self.requests.remove(request)
            if request.rate:
                self.recent.append(request)
            self._forget(now)
            self.cond.notify_all()
        done = self._finished(request, now)
        if self.observe is not None:
            self.observe(done)
        return done

    def _finished(self, request: Request, now: float) -> Finished:
        generated, first = request.generated(now), None
        if request.started is not None and self.role == "prefill":
            first = request.started + self.forward_time(request)    # the prefill computes the first token
        elif request.started is not None and generated:
            first = request.started + 1 / request.rate
        return Finished(request.prompt, request.cached, generated, None if first is None else first - request.arrived,
                        1 / request.rate if request.rate else 0.0, now - request.arrived)

    # What the server adds up to.

    def snapshot(self) -> Load:
        """The gauges' figures now."""
        with self.cond:
            now = self.clock()
            self._forget(now)
            phases = [r.phase for r in self.requests]
            holding = HOLDING_KV[self.role]
            used = sum(r.prompt + r.generated(now) for r in self.requests if r.phase in holding)
            running = phases.count(RUNNING[self.role])
            generated = sum(r.generating(now - WINDOW, now) for r in [*self.recent, *self.requests])
            prompts = sum(prompt for _, prompt, _ in self.prefills)
            cached = sum(hit for _, _, hit in self.prefills)
        usage = used / MAX_TOTAL_TOKENS
        prefill, decode = self.role == "prefill", self.role == "decode"
        return Load(
            running=running, queued=phases.count("queue"), used_tokens=used, token_usage=usage,
            gen_throughput=generated / WINDOW, cache_hit_rate=cached / prompts if prompts else 0.0,
            # SGLang's own: -1 on a prefill; on a decode, the busier of its batch and its KV cache.
            utilization=-1.0 if prefill else max(running / self.capacity, usage / 0.9),
            prefill_bootstrap=phases.count("bootstrap") if prefill else 0,
            prefill_inflight=phases.count("inflight") if prefill else 0,
            decode_prealloc=phases.count("prealloc") if decode else 0,
            decode_transfer=phases.count("transfer") if decode else 0)

    def take_prefilled(self) -> Prefilled:
        """What was prefilled since the last call (a prefill batch line's ``#new-seq`` and tokens)."""
        with self.cond:
            done, self.prefilled = self.prefilled, Prefilled()
            return done

    def _forget(self, now: float) -> None:
        """Drop what ended before the window."""
        while self.recent and (self.recent[0].ended or 0.0) < now - WINDOW:
            self.recent.popleft()
        while self.prefills and self.prefills[0][0] < now - WINDOW:
            self.prefills.popleft()

    # How long things take.

    @staticmethod
    def forward_time(request: Request) -> float:
        """A prefill's forward pass over the prompt's new tokens."""
        return (request.prompt - request.cached) / PREFILL_RATE

    @staticmethod
    def transfer_time(request: Request) -> float:
        """The KV cache of the prompt, from prefill to decode."""
        return request.prompt / TRANSFER_RATE

    # A handler thread's run through its request.

    def serve(self, prompt: int, max_tokens: int, prefix: str = "", prefix_tokens: int = 0,
              sleep: Callable[[float], None] = time.sleep, *, stalls: bool = False) -> Generator[int, None, None]:
        """Take a request through its phases, sleeping as the server would; yields each token's index when
        it is due (a prefill yields none). Closing the iterator early (a client gone) ends the request too.
        ``stalls``: its KV transfer never completes (it waits in its transfer phase for :data:`STALL`)."""
        request = self.arrive(prompt, max_tokens, prefix, prefix_tokens)
        stall = STALL if stalls else 0.0
        try:
            sleep(HANDSHAKE)
            if self.role == "decode":
                self.move(request, "transfer")      # the prefill computes and sends meanwhile
                sleep(self.forward_time(request) + self.transfer_time(request) + stall)
            self.move(request, "queue")
            started = self._wait_for_slot(request)
            if self.role == "prefill":
                sleep(self.forward_time(request))
                self.move(request, "inflight")
                sleep(self.transfer_time(request) + stall)
                return
            for n in range(request.max_tokens):
                sleep(max(0.0, started + (n + 1) / request.rate - self.clock()))
                yield n
        finally:
            self.finish(request)

    def _wait_for_slot(self, request: Request) -> float:
        """Wait in the queue until ``request`` runs; when it started."""
        with self.cond:
            while not self.try_start(request):
                self.cond.wait()
            assert request.started is not None   # try_start set it
            return request.started
