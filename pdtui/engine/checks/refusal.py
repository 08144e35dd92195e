"""Why a router does not take a backend pdtui calls ready: what the router asks a worker, asked again.

A router takes a worker in steps, each asking it something with a limit of
its own (measured against smg 1.13 and sglang-router 0.3.2 in PD mode, and
read in their source):

- its health check, ``GET /health`` within ``--health-check-timeout-secs``
  (5 s): retried until ``--worker-startup-timeout-secs``, the worker not
  listed meanwhile; once taken, asked every ``--health-check-interval-secs``
  and the worker listed unhealthy after ``--health-failure-threshold`` fails;
- smg's backend detection, ``GET /v1/models`` within the same 5 s: an answer
  401 (a server started with ``--api-key`` the router does not send) keeps the
  worker out for minutes;
- its metadata, ``GET /server_info`` and ``GET /model_info`` (each
  ``/get_…`` after a 404), 10 s for the step: SGLang answers ``/server_info``
  from its scheduler, so a scheduler busy elsewhere (PD bootstrap polling, a
  transfer engine's start) lets the step time out three times, after which
  sglang-router gives the worker up ("Workflow deadlocked") and smg takes it
  as model ``unknown``, which pairs with nothing (sgl-project/sglang#24115).

So pdtui asks the same, with the same limits, from the router's host at the
URL the router was given, in the background (an ask may take its whole limit:
the probe does not wait for it), and the first that fails is the reason, told
with the router's own line about that worker (engine/router_lines.py) and
what to do next.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from pdtui.engine.checks.workers import Backend, Untaken, url_address
from pdtui.engine.router_lines import WorkerLines
from pdtui.hosts.http import HttpProber, HttpResult, marked

HEALTH_TIMEOUT = 5.0      # the routers' --health-check-timeout-secs default
METADATA_TIMEOUT = 10.0   # the routers' metadata step
AGAIN = 10.0              # seconds after an ask's answer before a backend still not taken is asked again
GRACE = 5.0               # seconds a backend goes untaken before it is first asked: a router takes a ready worker in
                          # about a second (its health check, its metadata), so one not taken by then is news


@dataclass(frozen=True, slots=True)
class Ask:
    """One thing a router asks a worker it takes."""

    path: str
    timeout: float
    what: str                      # the router's step, as the reason names it
    steps: tuple[str, ...]         # the router's workflow steps that ask it (its log names them)
    old: str | None = None         # the older name the router asks after a 404
    limit: str = "the router's limit"

    def late(self) -> str:
        return f"no answer within {self.timeout:g} s, {self.limit}"


ASKS = (
    Ask("/health", HEALTH_TIMEOUT, "health check", ("detect_connection_mode",),
        limit="its --health-check-timeout-secs"),
    Ask("/v1/models", HEALTH_TIMEOUT, "backend detection", ("detect_backend", "discover_metadata")),
    Ask("/server_info", METADATA_TIMEOUT, "metadata read", ("detect_backend", "discover_metadata", "discover_dp_info"),
        old="/get_server_info"),
    Ask("/model_info", METADATA_TIMEOUT, "metadata read", ("discover_metadata",), old="/get_model_info"),
)
ASKED = ", ".join(ask.path for ask in ASKS)

NEXT_REACH = ("check the URL the router was given (its --prefill/--decode) against the address the server listens on "
              "(--host), from the router's host")
NEXT_BUSY_HEALTH = ("a busy server answers /health late (SGLang's runs a one-token generation): raise the router's "
                    "--health-check-timeout-secs")
NEXT_HEALTH = ("SGLang answers /health 503 while it starts or shuts down, or when its health generation got no answer "
               "for 20 s")
NEXT_KEY = ("the server wants an API key the router does not send: start the router with the servers' key (its "
            "--api-key, which it sends to its workers)")
NEXT_SCHEDULER = ("SGLang answers /server_info from its scheduler, and a scheduler busy elsewhere (PD bootstrap polling, "
                  "a transfer engine's start) keeps the worker out: sglang-router gives it up after 3 tries, smg takes "
                  "it as model 'unknown'; once it answers, restart the router or take the worker out and add it again "
                  "(DELETE then POST /workers)")
NEXT_UNKNOWN = ("it could not read the worker's model when it took it: once the server answers "
                f"{ASKED}, restart the router or take the worker out and add it again (DELETE then POST /workers)")


@dataclass(frozen=True, slots=True)
class Refusal:
    """What a worker answered that the router does not take, and what to do about it."""

    words: str
    steps: tuple[str, ...]
    next: str


def refusal(ask: Ask, url: str, result: HttpResult, key_env: str | None = None) -> Refusal | None:
    """What in ``result`` keeps the router from taking the worker at ``url``, None when the router goes on."""
    asked = f"the router's {ask.what} (GET {ask.path} at {url})"
    if result.status is None:
        if result.timed_out:
            late = NEXT_BUSY_HEALTH if ask.path == "/health" else NEXT_SCHEDULER
            return Refusal(f"{asked}: {ask.late()}", ask.steps, late)
        return Refusal(f"{asked}: {result.error}", ask.steps, NEXT_REACH)
    if result.status in (401, 403):
        key = (f"it refused the key pdtui sends as the router's (in {key_env}): give the servers and the router one "
               "key" if key_env else NEXT_KEY)
        return Refusal(f"{asked}: {result.describe(80)}", ask.steps, key)
    if ask.path == "/health" and not result.ok:
        return Refusal(f"{asked}: {result.describe(80)}", ask.steps, NEXT_HEALTH)
    return None


async def ask_as_router(prober: HttpProber, url: str, key_env: str | None = None) -> Refusal | None:
    """The router's asks of the worker at ``url``, in its order and with its limits: the first it would not take
    (None: it takes every answer)."""
    address = url_address(url)
    if address is None:
        return None
    host, port = address
    if port is None:
        return None
    for ask in ASKS:
        result = await prober.request("GET", port, marked(ask.path), timeout=ask.timeout, address=host)
        if result.status == 404 and ask.old:
            result = await prober.request("GET", port, marked(ask.old), timeout=ask.timeout, address=host)
        found = refusal(ask, url, result, key_env)
        if found is not None:
            return found
    return None


class Refusals:
    """Why the router has not taken each backend it should, found by asking what it asks (:func:`ask_as_router`)
    in the background, and by its own lines about that worker.

    ``url_of``: the URL the router was given for a backend (None: not known yet); ``lines``: the router's lines
    of its current invocation; ``grace``: how long a backend goes untaken before it is asked."""

    def __init__(self, prober: HttpProber, url_of: Callable[[Backend], str | None], lines: WorkerLines | None = None,
                 *, key_env: str | None = None, clock: Callable[[], float] = time.monotonic,
                 grace: float = GRACE) -> None:
        self._prober = prober
        self._grace = grace
        self._since: dict[str, float] = {}      # when each backend was first found untaken
        self._url_of = url_of
        self._lines = lines
        self._key_env = key_env
        self._clock = clock
        self._asking: dict[str, asyncio.Task[Refusal | None]] = {}
        self._found: dict[str, tuple[float, str, Refusal | None]] = {}   # by service: when, the URL asked, what

    def why(self, untaken: Untaken) -> str | None:
        """Why the router has not taken it, as far as known now: what it refuses in the worker's answers, else its
        own line about the worker, with what to do; None while nothing is known. Asks the worker again, in the
        background, when that is due."""
        if untaken.how == "unpaired" and not untaken.unknown_model:
            return None             # it answers: it serves another model (the workers check says what to do)
        backend = untaken.backend
        url = untaken.url or self._url_of(backend)
        if url is None:
            return None
        self._ask(backend.service, url)
        found = self._found.get(backend.service)
        answered = found is not None and found[1] == url
        refused = found[2] if found is not None and answered else None
        said = self._lines.about(url, refused.steps if refused else ()) if self._lines else None
        if refused is not None:
            return _told(refused.words, said, refused.next)
        if untaken.unknown_model:       # known once its answers are: a failure told then is final
            return _told("the router lists it as model 'unknown'", said, NEXT_UNKNOWN) if answered else None
        if said is not None:
            return f"the router logged: {said}"
        if answered:
            return f"it answers all the router asks ({ASKED}) at {url}"
        return None

    def _ask(self, service: str, url: str) -> None:
        now = self._clock()
        if service in self._asking or now - self._since.setdefault(service, now) < self._grace:
            return
        found = self._found.get(service)
        if found is not None and found[1] == url and now - found[0] < AGAIN:
            return
        task = asyncio.get_running_loop().create_task(ask_as_router(self._prober, url, self._key_env))
        self._asking[service] = task
        task.add_done_callback(lambda done: self._answered(service, url, done))

    def _answered(self, service: str, url: str, task: asyncio.Task[Refusal | None]) -> None:
        del self._asking[service]
        if not task.cancelled() and task.exception() is None:
            self._found[service] = (self._clock(), url, task.result())

    async def settled(self) -> None:
        """Until every ask under way has its answer (tests; a probe never waits for them)."""
        while self._asking:
            await asyncio.gather(*self._asking.values(), return_exceptions=True)


def _told(words: str, said: str | None, then: str) -> str:
    quoted = f"; the router logged: {said}" if said else ""
    return f"{words}; next: {then}{quoted}"
