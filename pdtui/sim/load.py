"""``python -m pdtui.sim.load --url http://127.0.0.1:PORT --model NAME [--rate R] [--concurrency C]``: light traffic.

What the demo's deployment serves, so its figures (``/metrics``, the batch
lines) have something to show: chat completions through the router, each with
the same system prompt (as an application's are) and a question of varying
length, ``max_tokens`` 16 to 128, a third of them streamed; about R started a
second, at most C in flight. A router that is not up yet, or failing, is tried
again after a small backoff, for ever: the demo starts this before its router
and stops it by PID. SIGTERM or SIGINT ends it at once, with status 0.
Stdlib only, like every sim program.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import urlsplit

from pdtui.sim.httpserve import set_on_signal

SYSTEM_PROMPT = ("You are a concise assistant for a team that runs large language models in production. "
                 "Answer in plain words, one short paragraph, and say so when you do not know.")
TOPICS = ("prefill", "decode", "KV cache", "router", "batch size", "GPU memory", "throughput", "latency", "NCCL",
          "tensor parallelism", "warm-up", "bootstrap port", "prefix cache", "token budget", "health check")
FILLER = ("please", "explain", "briefly", "how", "the", "works", "when", "under", "load", "and", "why", "it",
          "matters", "for", "a", "deployment", "with", "many", "users", "at", "once")
MIN_TOKENS, MAX_TOKENS = 16, 128
TIMEOUT = 60.0          # seconds one answer may take
BACKOFF = (0.25, 2.0)   # seconds before trying again after a failure: the first, and at most


def question(rng: random.Random) -> str:
    """A user's question of 5 to about 300 words."""
    words = [rng.choice(FILLER) for _ in range(int(rng.expovariate(1 / 40)) % 300 + 5)]
    words.insert(rng.randrange(len(words)), rng.choice(TOPICS))
    words[0] = words[0][:1].upper() + words[0][1:]
    return " ".join(words) + "?"


def request_body(model: str, rng: random.Random) -> dict[str, Any]:
    """One chat completion as an application sends it."""
    return {"model": model, "max_tokens": rng.randint(MIN_TOKENS, MAX_TOKENS), "temperature": 0.7,
            "stream": rng.random() < 1 / 3,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question(rng)}]}


class Pacer:
    """Arrivals at about ``rate`` a second (a Poisson process), shared by the clients."""

    def __init__(self, rate: float, rng: random.Random, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.rng = rng
        self.clock = clock
        self.lock = threading.Lock()
        self.next_at = clock()

    def delay(self) -> float:
        """Seconds until the caller's turn; a client busy meanwhile does not make the next ones come faster."""
        with self.lock:
            now = self.clock()
            at = max(self.next_at, now)
            self.next_at = at + self.rng.expovariate(self.rate)
            return at - now


class Tally:
    """Answers and failures so far; a line in the log each time the router starts or stops answering."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.answered = self.failed = 0
        self.up: bool | None = None
        self.closed = False

    def record(self, ok: bool, url: str, detail: str) -> None:
        with self.lock:
            if self.closed:     # a request that ended after the stop: the log is done
                return
            if ok:
                self.answered += 1
            else:
                self.failed += 1
            if ok != self.up:
                self.up = ok
                self._say(f"{url} answers: sending" if ok else f"{url}: {detail}; trying again")

    def say(self, message: str) -> None:
        with self.lock:
            self._say(message)

    def close(self) -> None:
        """The last line; nothing is written after it."""
        with self.lock:
            self._say(f"stopped: {self.answered} answered, {self.failed} failed")
            self.closed = True

    def _say(self, message: str) -> None:
        self.out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} load: {message}\n")
        self.out.flush()


class Load:
    """The clients, each sending one request at a time when the pacer says so."""

    def __init__(self, url: str, model: str, rate: float, concurrency: int, stop: threading.Event, tally: Tally,
                 rng: random.Random | None = None) -> None:
        parts = urlsplit(url)
        self.url, self.host, self.port = url, parts.hostname or "127.0.0.1", parts.port or 80
        self.model = model
        self.concurrency = concurrency
        self.stop = stop
        self.tally = tally
        self.rng = rng or random.Random()
        self.pacer = Pacer(rate, self.rng)

    def run(self) -> None:
        """Send until stopped; the clients are daemon threads, so a request under way never holds the exit."""
        for n in range(self.concurrency):
            threading.Thread(target=self._client, name=f"load-{n}", daemon=True).start()
        self.stop.wait()

    def _client(self) -> None:
        backoff = BACKOFF[0]
        while not self.stop.wait(self.pacer.delay()):
            ok, detail = self._send(request_body(self.model, self.rng))
            self.tally.record(ok, self.url, detail)
            if ok:
                backoff = BACKOFF[0]
                continue
            if self.stop.wait(backoff * self.rng.uniform(0.8, 1.2)):
                return
            backoff = min(BACKOFF[1], backoff * 2)

    def _send(self, body: dict[str, Any]) -> tuple[bool, str]:
        """One chat completion, read to its end; whether it was answered, and if not why."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException) as exc:
            return False, str(exc) or type(exc).__name__
        finally:
            conn.close()
        if response.status >= 400:
            return False, f"HTTP {response.status} {answer[:120].decode('utf-8', 'replace')}"
        return True, ""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pdtui.sim.load", description="Light chat-completion traffic through a router.")
    parser.add_argument("--url", required=True, help="the router, e.g. http://127.0.0.1:30001")
    parser.add_argument("--model", required=True, help="the model the requests name (the router may route by it)")
    parser.add_argument("--rate", type=float, default=1.0, help="requests started a second, about (default 1)")
    parser.add_argument("--concurrency", type=int, default=3, help="requests in flight at most (default 3)")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.concurrency < 1:
        parser.error("--rate must be positive and --concurrency at least 1")
    if urlsplit(args.url).scheme != "http":
        parser.error(f"--url {args.url}: an http:// URL")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    set_on_signal(stop, signal.SIGTERM, signal.SIGINT)
    tally = Tally(sys.stdout)
    tally.say(f"{args.rate:g} requests a second, at most {args.concurrency} in flight, to {args.url}")
    Load(args.url, args.model, args.rate, args.concurrency, stop, tally).run()
    tally.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
