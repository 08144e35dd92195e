"""Why a router does not take a backend: pdtui asks what the router asks, with its limits, reads the router's lines
about that worker, and names the reason in the workers check (fakes: no server, no router)."""

from __future__ import annotations

import json

import pytest

from pdtui.engine.checks.refusal import ASKS, NEXT_KEY, NEXT_SCHEDULER, Refusals, ask_as_router
from pdtui.engine.checks.router import RouterProbe
from pdtui.engine.checks.workers import NEXT_MODEL, Backend, check_workers
from pdtui.engine.router_lines import WorkerLines
from pdtui.hosts.http import HttpResult
from pdtui.vocabulary.checks import Check

ROUTER, PREFILL, DECODE = 8000, 30000, 30002
DECODE_URL = f"http://127.0.0.1:{DECODE}"
BACKENDS = [Backend("prefill", "prefill", PREFILL, frozenset({"127.0.0.1", "localhost"})),
            Backend("decode", "decode", DECODE, frozenset({"127.0.0.1", "localhost"}))]
LATE = "late"       # an answer that does not come within the request's timeout
OK = HttpResult(200, b"{}", 0.001)


class Prober:
    """Answers by port and path (``LATE``: no answer within the timeout asked for), and keeps what was asked."""

    def __init__(self, answers: dict[tuple[int, str], HttpResult | str]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int, str, float]] = []

    async def request(self, method: str, port: int, path: str, *, body: object = None, timeout: float = 5.0,
                      address: str = "127.0.0.1") -> HttpResult:
        path = path.split("?", 1)[0]
        self.asked.append((address, port, path, timeout))
        answer = self.answers.get((port, path), OK if path in {a.path for a in ASKS} else HttpResult(404, b"", 0.0))
        if answer == LATE:
            return HttpResult(None, b"", timeout, f"no answer within {timeout:g}s")
        assert isinstance(answer, HttpResult)
        return answer

    async def get(self, port: int, path: str, *, timeout: float = 5.0, address: str = "127.0.0.1") -> HttpResult:
        return await self.request("GET", port, path, timeout=timeout, address=address)


def listing(*workers: dict) -> HttpResult:
    return HttpResult(200, json.dumps({"workers": list(workers), "total": len(workers)}).encode(), 0.001)


def worker(backend: Backend, healthy: bool = True, models: tuple[str, ...] | None = None) -> dict:
    """A worker as a router lists it; ``models``: smg's list of what it routes to it."""
    listed = {"url": f"http://127.0.0.1:{backend.port}", "worker_type": backend.role, "is_healthy": healthy}
    if models is not None:
        listed |= {"model_id": models[0], "models": [{"id": m, "model_type": ["chat"]} for m in models]}
    return listed


# Real lines (ANSI colours and all, as a journal holds them) of the two routers about a decode at DECODE_URL.
SGLANG_ROUTER_METADATA = [   # sglang-router 0.3.2: the decode's /server_info never answers
    "\x1b[2m2026-12-07 20:01:17\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2msmg::workflow::event\x1b[0m\x1b[2m:\x1b[0m "
    "\x1b[2m/home/runner/work/sglang/sglang/src/workflow/event.rs\x1b[0m\x1b[2m:\x1b[0m\x1b[2m197\x1b[0m\x1b[2m:\x1b[0m "
    "Workflow started instance_id=687eac71-ffd5-4837-b115-6f523acb5748 definition_id=local_worker_registration",
    "2026-12-07 20:01:27  WARN smg::workflow::event: /home/runner/work/sglang/sglang/src/workflow/event.rs:233: "
    "Step failed instance_id=687eac71-ffd5-4837-b115-6f523acb5748 step_id=discover_metadata "
    'error="Step timeout after 10s" will_retry=true',
    "2026-12-07 20:01:49 ERROR smg::workflow::event: /home/runner/work/sglang/sglang/src/workflow/event.rs:270: "
    "Workflow failed instance_id=687eac71-ffd5-4837-b115-6f523acb5748 failed_step=internal_scheduler "
    'error="Workflow deadlocked: no steps ready and none running"',
]
SMG_KEY = [   # smg 1.13: the decode was started with --api-key, which the router does not send
    "2026-12-07 20:06:06  WARN wfaas::event: crates/workflow/src/event.rs:238: Step failed "
    "instance_id=01a2521d-135f-73ea-a21b-ceff059eb5da step_id=detect_backend error=\"Step failed: detect_backend - "
    f"HTTP backend detection failed for {DECODE_URL}: Could not detect HTTP backend for {DECODE_URL}: /v1/models: "
    f"{DECODE_URL}/v1/models returned status 401 Unauthorized\" will_retry=true",
]
SMG_PREFILL_BOOTSTRAP = (   # about another worker
    "2026-12-07 20:06:07  WARN smg::worker::bootstrap_probe: model_gateway/src/worker/bootstrap_probe.rs:185: Bootstrap "
    'port did not accept a connection at registration worker="http://127.0.0.1:30000" worker_type="prefill"')


def lines(*fed: str, invocation: str = "i1") -> WorkerLines:
    said = WorkerLines()
    for line in fed:
        said.feed(line, invocation)
    return said


def test_a_line_that_names_the_worker_is_its_own():
    said = lines(*SMG_KEY, SMG_PREFILL_BOOTSTRAP)
    about = said.about(DECODE_URL)
    assert about is not None and about.startswith("Step failed step_id=detect_backend error=") and "401" in about
    assert "instance_id" not in about and "wfaas" not in about
    assert said.about("http://127.0.0.1:30000").startswith("Bootstrap port did not accept")
    assert said.about("http://127.0.0.1:3000") is None, "another port is another worker"


def test_an_instance_that_names_no_worker_is_found_by_the_step_that_failed():
    said = lines(*SGLANG_ROUTER_METADATA)
    assert said.about(DECODE_URL) is None, "no step named: nothing of it is the decode's"
    assert said.about(DECODE_URL, ("discover_metadata",)) == (
        'Workflow failed failed_step=internal_scheduler error="Workflow deadlocked: no steps ready and none running"')
    assert said.about(DECODE_URL, ("detect_connection_mode",)) is None


def test_a_line_coloured_field_by_field_is_read_as_its_text():
    smg = ("\x1b[2m2026-12-07 20:25:08\x1b[0m \x1b[33m WARN\x1b[0m \x1b[2mwfaas::event\x1b[0m\x1b[2m:\x1b[0m \x1b[2mcrates/"
           "workflow/src/event.rs\x1b[0m\x1b[2m:\x1b[0m\x1b[2m238:\x1b[0m Step failed \x1b[3minstance_id\x1b[0m\x1b[2m=\x1b[0m"
           "01a2522e-583c-72c2-878e-eabebce6afee \x1b[3mstep_id\x1b[0m\x1b[2m=\x1b[0mdiscover_metadata \x1b[3merror\x1b[0m"
           '\x1b[2m=\x1b[0m"Step timeout after 10s" \x1b[3mwill_retry\x1b[0m\x1b[2m=\x1b[0mtrue')     # smg 1.13's journal
    assert lines(smg).about(DECODE_URL, ("discover_metadata",)) == (
        'Step failed step_id=discover_metadata error="Step timeout after 10s" will_retry=true')


def test_an_instance_tied_to_another_worker_is_not_this_ones():
    other = ("2026-12-07 20:01:20  WARN smg::workflow::event: x/event.rs:233: Step failed instance_id=687eac71-ffd5-"
             "4837-b115-6f523acb5748 step_id=detect_connection_mode error=\"http health check failed for explicitly "
             "configured worker URL http://127.0.0.1:30000: Health check failed\" will_retry=true")
    said = lines(other, *SGLANG_ROUTER_METADATA)
    assert said.about(DECODE_URL, ("discover_metadata",)) is None
    assert said.about("http://127.0.0.1:30000").startswith("Workflow failed"), "the instance is the prefill's"


def test_a_new_invocation_forgets_the_last_ones_lines():
    said = lines(*SMG_KEY)
    said.feed("2026-12-07 20:07:00  INFO smg::server: x/server.rs:1: Starting router", "i2")
    assert said.about(DECODE_URL) is None


@pytest.mark.parametrize("answers, words, then", [
    ({(DECODE, "/server_info"): LATE},
     f"the router's metadata read (GET /server_info at {DECODE_URL}): no answer within 10 s, the router's limit",
     NEXT_SCHEDULER),
    ({(DECODE, "/health"): LATE}, f"the router's health check (GET /health at {DECODE_URL}): no answer within 5 s, "
                                  "its --health-check-timeout-secs", "raise the router's --health-check-timeout-secs"),
    ({(DECODE, "/health"): HttpResult(503, b"", 0.001)},
     f"the router's health check (GET /health at {DECODE_URL}): HTTP 503", "SGLang answers /health 503"),
    ({(DECODE, "/v1/models"): HttpResult(401, b'{"error": "Unauthorized"}', 0.001)},
     f'the router\'s backend detection (GET /v1/models at {DECODE_URL}): HTTP 401: {{"error": "Unauthorized"}}',
     NEXT_KEY),
    ({(DECODE, "/health"): HttpResult(None, b"", 0.0, "cannot connect: [Errno 111] Connection refused")},
     f"the router's health check (GET /health at {DECODE_URL}): cannot connect: [Errno 111] Connection refused",
     "check the URL the router was given"),
], ids=["server-info-late", "health-late", "health-503", "api-key", "unreachable"])
async def test_the_first_ask_the_router_would_not_take_is_the_reason(answers, words, then):
    refused = await ask_as_router(Prober(answers), DECODE_URL)  # type: ignore[arg-type]
    assert refused is not None and refused.words == words and then in refused.next


async def test_the_router_is_asked_after_in_its_order_with_its_limits_and_the_old_names_after_a_404():
    prober = Prober({(DECODE, "/server_info"): HttpResult(404, b"", 0.0)})
    assert await ask_as_router(prober, DECODE_URL) is None  # type: ignore[arg-type]
    assert prober.asked == [("127.0.0.1", DECODE, "/health", 5.0), ("127.0.0.1", DECODE, "/v1/models", 5.0),
                            ("127.0.0.1", DECODE, "/server_info", 10.0), ("127.0.0.1", DECODE, "/get_server_info", 10.0),
                            ("127.0.0.1", DECODE, "/model_info", 10.0)]


async def test_a_key_the_server_refuses_though_pdtui_sends_the_routers_is_named_by_its_variable():
    prober = Prober({(DECODE, "/v1/models"): HttpResult(401, b"", 0.001)})
    refused = await ask_as_router(prober, DECODE_URL, "ROUTER_KEY")  # type: ignore[arg-type]
    assert refused is not None and "ROUTER_KEY" in refused.next


def probe(prober: Prober, said: WorkerLines | None = None) -> tuple[RouterProbe, Refusals]:
    refusals = Refusals(prober, lambda b: f"http://127.0.0.1:{b.port}", said, grace=0.0)  # type: ignore[arg-type]
    return RouterProbe(prober, ROUTER, BACKENDS, refusals=refusals), refusals  # type: ignore[arg-type]


async def test_a_missing_decode_is_named_with_what_it_does_not_answer_and_the_routers_line():
    prober = Prober({(ROUTER, "/workers"): listing(worker(BACKENDS[0])), (DECODE, "/server_info"): LATE})
    router, refusals = probe(prober, lines(*SGLANG_ROUTER_METADATA))
    first = await router._workers()
    assert not first.ok and first.detail == "missing: decode", "asked in the background: not known yet"
    await refusals.settled()
    check = await router._workers()
    assert not check.ok and not check.final
    assert check.detail.startswith(f"missing: decode; decode: the router's metadata read (GET /server_info at "
                                   f"{DECODE_URL}): no answer within 10 s, the router's limit; next: SGLang answers "
                                   "/server_info from its scheduler")
    assert check.detail.endswith('; the router logged: Workflow failed failed_step=internal_scheduler '
                                 'error="Workflow deadlocked: no steps ready and none running"')
    assert [a for a in prober.asked if a[1] == DECODE][-1] == ("127.0.0.1", DECODE, "/server_info", 10.0)


async def test_an_unhealthy_decode_is_asked_at_the_url_the_router_lists():
    listed = {**worker(BACKENDS[1], healthy=False), "url": "http://localhost:30002"}
    prober = Prober({(ROUTER, "/workers"): listing(worker(BACKENDS[0]), listed),
                     (DECODE, "/health"): HttpResult(503, b"", 0.001)})
    router, refusals = probe(prober)
    await router._workers()
    await refusals.settled()
    check = await router._workers()
    assert check.detail.startswith("unhealthy: decode; decode: the router's health check (GET /health at "
                                   "http://localhost:30002): HTTP 503; next: SGLang answers /health 503")
    assert ("localhost", DECODE, "/health", 5.0) in prober.asked


async def test_a_missing_decode_that_answers_everything_is_said_to_answer():
    prober = Prober({(ROUTER, "/workers"): listing(worker(BACKENDS[0]))})
    router, refusals = probe(prober)
    await router._workers()
    await refusals.settled()
    check = await router._workers()
    assert check.detail == ("missing: decode; decode: it answers all the router asks (/health, /v1/models, "
                            f"/server_info, /model_info) at {DECODE_URL}")


async def test_a_backend_is_asked_only_once_the_router_has_had_the_time_to_take_it():
    now = [0.0]
    prober = Prober({(ROUTER, "/workers"): listing(worker(BACKENDS[0]))})
    refusals = Refusals(prober, lambda b: f"http://127.0.0.1:{b.port}", clock=lambda: now[0])  # type: ignore[arg-type]
    router = RouterProbe(prober, ROUTER, BACKENDS, refusals=refusals)  # type: ignore[arg-type]
    await router._workers()
    now[0] = 4.0
    await router._workers()
    assert [a for a in prober.asked if a[1] == DECODE] == [], "the router registers a worker in about a second"
    now[0] = 5.0
    await router._workers()
    await refusals.settled()
    assert [a[2] for a in prober.asked if a[1] == DECODE] == [a.path for a in ASKS]


async def test_readiness_not_ready_goes_on_to_the_workers_that_say_why():
    prober = Prober({(ROUTER, "/readiness"): HttpResult(503, b'{"status":"not ready"}', 0.001),
                     (ROUTER, "/workers"): listing(worker(BACKENDS[0]))})
    router, _ = probe(prober)
    router._tcp = _accepting  # type: ignore[method-assign,assignment]
    told = [check async for check in router.steps(None)]  # type: ignore[arg-type]
    assert [(c.name, c.ok) for c in told] == [("tcp", True), ("readiness", False), ("workers", False)]
    assert told[-1].detail.startswith("missing: decode")


async def _accepting(host: object) -> Check:
    return Check("tcp", True, "port 8000 accepting")


def test_a_prefill_and_a_decode_of_two_models_never_pair_where_the_router_routes_by_model():
    payload = [worker(BACKENDS[0], models=("tiny/m",)), worker(BACKENDS[1], models=("served-x",))]
    check = check_workers(payload, BACKENDS)
    assert not check.ok and check.final, "smg never reads a worker's model again: waiting will not cure it"
    assert check.detail == ("unpaired: prefill serves 'tiny/m', which no decode serves; decode serves 'served-x', "
                            f"which no prefill serves; next: {NEXT_MODEL}")


def test_a_prefill_without_any_decode_listed_is_not_unpaired_the_decode_is_missing():
    assert check_workers([worker(BACKENDS[0], models=("tiny/m",))], BACKENDS).detail == "missing: decode"


def test_a_router_that_lists_no_models_sends_any_request_anywhere():
    listed = [worker(BACKENDS[0]), worker(BACKENDS[1])]
    listed[1]["model_id"] = "served-x"           # sglang-router 0.3 lists a model, and routes by none
    assert check_workers(listed, BACKENDS).ok


async def test_a_decode_taken_as_model_unknown_is_named_with_why_its_metadata_went_unread():
    payload = listing(worker(BACKENDS[0], models=("tiny/m",)), worker(BACKENDS[1], models=("unknown",)))
    prober = Prober({(ROUTER, "/workers"): payload, (DECODE, "/server_info"): LATE})
    router, refusals = probe(prober)
    first = await router._workers()
    assert not first.final, "final once the reason is known, so that the failure tells it"
    await refusals.settled()
    check = await router._workers()
    assert check.final and NEXT_MODEL not in check.detail
    assert check.detail.startswith("unpaired: prefill serves 'tiny/m', which no decode serves; decode serves "
                                   "'unknown', which no prefill serves; decode: the router's metadata read (GET "
                                   "/server_info")
