"""The requests a server holds for a KV transfer: read from SGLang's disaggregation queues and vLLM's KV fetch
stages, shown on the figures line, waited for by a drain (on the sim's own /metrics, in milliseconds), and warned
of when they stay there with nothing moving on."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from pdtui.engine.drain import Drain
from pdtui.engine.events import Notice, ServingFigures
from pdtui.engine.timing import Timing
from pdtui.engine.transfer_watch import TransferWatch
from pdtui.servers.sglang.engine import ENGINE as SGLANG
from pdtui.servers.sglang.metrics import figures_between, parse_metrics, transfer_queues
from pdtui.servers.vllm import metrics as vllm_metrics
from pdtui.sim.metrics import Metrics
from pdtui.sim.serving import Serving
from pdtui.ui.format import figures_summary
from pdtui.vocabulary.figures import Figures, TransferQueues, TransferStage


def sglang_text(**queues: int) -> str:
    """A scheduler's gauges as 0.5.23 exports them on two TP ranks (each reports the same scheduler)."""
    registry = CollectorRegistry()
    labels = ["model_name", "tp_rank"]
    for name, value in {"num_running_reqs": 1, "num_queue_reqs": 0, **queues}.items():
        gauge = Gauge(f"sglang:{name}", name, labels, registry=registry)
        for rank in ("0", "1"):
            gauge.labels("m", rank).set(value)
    Counter("sglang:num_requests", "finished", ["model_name"], registry=registry).labels("m").inc(7)
    return generate_latest(registry).decode()


def test_sglangs_queues_are_read_from_rank_zero_in_the_words_of_its_poll_states() -> None:
    text = sglang_text(num_decode_prealloc_queue_reqs=2, num_decode_transfer_queue_reqs=3)
    queues = transfer_queues(text)
    assert queues is not None and queues.requests == 5 and queues.moved == 7
    assert queues.stages == (
        TransferStage("decode prealloc queue", "KVPoll.Bootstrapping: the handshake with its prefill", 2),
        TransferStage("decode transfer queue", "KVPoll.WaitingForInput: waiting for the prefill's KV", 3))
    figures = figures_between(None, parse_metrics(text, 1.0))
    assert (figures.running, figures.queued, figures.in_transfer) == (1, 0, 5)


def test_a_server_that_exports_no_queue_gauge_says_nothing_of_transfers() -> None:
    text = sglang_text()
    assert transfer_queues(text) is None
    assert figures_between(None, parse_metrics(text, 1.0), "prefill").in_transfer is None


def test_vllms_fetches_waiting_or_in_progress_are_in_transfer_and_those_completed_are_not() -> None:
    registry = CollectorRegistry()
    fetch = Gauge("vllm:num_requests_kv_fetch_by_stage", "KV fetch", ["model_name", "engine", "stage"],
                  registry=registry)
    for engine in ("0", "1"):
        fetch.labels("tiny", engine, "waiting_to_start").set(1)
        fetch.labels("tiny", engine, "in_progress").set(2)
        fetch.labels("tiny", engine, "completed_waiting").set(4)
    Gauge("vllm:num_requests_running", "running", ["model_name", "engine"], registry=registry).labels("tiny", "0")
    text = generate_latest(registry).decode()
    queues = vllm_metrics.transfer_queues(text)
    assert queues is not None
    assert [(s.queue, s.requests) for s in queues.stages] == [("KV fetch waiting to start", 2),
                                                               ("KV fetch in progress", 4)]
    assert vllm_metrics.figures_between(None, vllm_metrics.parse_metrics(text, 1.0)).in_transfer == 6


def test_the_figures_line_shows_requests_in_transfer_only_when_there_are_some() -> None:
    held = figures_summary(ServingFigures("prefill", "metrics", Figures(running=1, queued=0, in_transfer=3)))
    assert held == "1 running · 0 queued · 3 in KV transfer"
    idle = figures_summary(ServingFigures("prefill", "metrics", Figures(running=0, queued=0, in_transfer=0)))
    assert idle == "0 running · 0 queued"


class SimPrefill:
    """A draining prefill whose /metrics is the sim worker's, over its own requests (no HTTP)."""

    def __init__(self) -> None:
        self.serving = Serving("prefill")
        self.registry = Metrics(self.serving, "m")
        self.run = SimpleNamespace(name="prefill", cfg=SimpleNamespace(role="prefill"), serving=SGLANG,
                                   metrics=self, attempt=SimpleNamespace(batch_at=None))

    async def read(self, parse):
        return parse(self.registry.render().decode())

    def inflight(self, count: int) -> list:
        """``count`` requests whose KV was sent, none taken by its decode yet."""
        requests = [self.serving.arrive(100, 1) for _ in range(count)]
        for request in requests:
            self.serving.move(request, "inflight")
        return requests


async def test_a_drain_waits_for_a_prefills_requests_in_its_inflight_queue() -> None:
    prefill, now = SimPrefill(), [0.0]
    held = prefill.inflight(2)
    drain = Drain(prefill.run, [], timeout=60.0, clock=lambda: now[0])
    assert await drain._requests_left() == (2, 2), "nothing runs or waits, but two hold KV for their decode"
    for request in held:
        prefill.serving.finish(request)         # the decode took their KV
    assert await drain.until_idle() == 0
    assert (drain.left, drain.left_in_transfer) == (0, 0)


async def test_a_drain_cut_by_its_timeout_says_how_many_were_in_transfer() -> None:
    prefill, now = SimPrefill(), [0.0]
    prefill.inflight(3)
    prefill.serving.arrive(100, 1)             # one more in its bootstrap queue
    drain = Drain(prefill.run, [], timeout=0.0, clock=lambda: now[0])
    assert await drain.until_idle() == 4
    told = drain.told("back", 1.0)
    assert (told.cut, told.cut_in_transfer) == (4, 4)


class Watched:
    """A serving decode's run as its transfer watch sees it: its notices kept."""

    def __init__(self) -> None:
        self.told: list[Notice] = []
        self.name, self.cfg = "decode", SimpleNamespace(role="decode", follower=False)
        self.w = SimpleNamespace(timing=Timing(), emit=self.told.append, elapsed=lambda: 0.0)


def held(requests: int, moved: float) -> TransferQueues:
    return TransferQueues((TransferStage("decode transfer queue", "KVPoll.WaitingForInput: waiting for the prefill's "
                                                                  "KV", requests),), moved)


def test_requests_held_past_the_threshold_with_none_moving_on_are_warned_of_once_and_their_clearing_told() -> None:
    run = Watched()
    watch = TransferWatch(run)  # type: ignore[arg-type]
    for at in (0.0, 10.0, 20.0, 30.0, 40.0):
        watch.judge(held(2, 5.0), at)
    assert [(n.level, n.text) for n in run.told] == [(
        "warning", "decode: 2 requests stuck in KV transfer for 30s, none moving on: the decode side of its pairs, "
                   "in its decode transfer queue (KVPoll.WaitingForInput: waiting for the prefill's KV); the engine "
                   "fails them only at its own transfer timeout, minutes from now")]
    watch.judge(held(0, 5.0), 50.0)
    assert run.told[-1].text == ("decode: KV transfers move again: its decode transfer queue no longer holds the same "
                                 "requests, after 50s")


def test_requests_in_transfer_while_others_move_on_are_load_not_a_stall() -> None:
    run = Watched()
    watch = TransferWatch(run)  # type: ignore[arg-type]
    for n in range(10):
        watch.judge(held(3, float(n)), 10.0 * n)      # always some in transfer, and transfers completing
    assert not run.told
