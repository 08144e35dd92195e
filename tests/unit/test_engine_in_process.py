"""The engine in this process, on in-memory hosts and a fake clock: a bring-up of minutes runs in milliseconds.

The hosts are pdtui/sim/memhost.py's (systemctl, the journal, nvidia-smi answered in memory; their servers'
start-up lines and HTTP answers pdtui/sim/memservers.py's); the event loop's time is looptime's, so every sleep,
timeout and start-up script of the memory servers takes no wall time, and the orchestrator's clock is that loop's
time.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections import Counter

import pytest

from pdtui.engine.events import (
    Done,
    Drained,
    Notice,
    PhaseStarted,
    PreflightFinding,
    ProbeResult,
    StateChanged,
    Step,
    StepChanged,
    StepStatus,
)
from pdtui.engine.intent import Intent, RestartHow, Verb
from pdtui.engine.orchestrator import Orchestrator
from pdtui.engine.readiness import LineJudge
from pdtui.engine.states import ServiceState
from pdtui.engine.timing import Timing
from pdtui.faces.headless import LinePrinter, to_json
from pdtui.sim.memhost import MemoryConnection, MemoryFleet, MemoryHost
from pdtui.targets.registry import Registry
from pdtui.targets.systemd.commands import START_AND_SHOW
from pdtui.targets.systemd.host_session import HostSession
from pdtui.targets.systemd.unit_run import UnitRun
from tests.engine_helpers import Recorder, pd_deployment

pytestmark = pytest.mark.looptime

STARTUP = 60.0     # a backend's start-up, in the loop's seconds (the memory servers play SGLang's lines over it)


def deployment(timeout: str = "10m", decodes: int = 1):
    """One host: a prefill on GPUs 0-3, a decode on 4-7 (and ``decodes - 1`` more, GPUs unsaid), a router."""
    return pd_deployment(
        {"prefill": {"gpus": [0, 1, 2, 3], "numa": 0, "port": 30000, "bootstrap_port": 8998}},
        {"decode": {"gpus": [4, 5, 6, 7], "numa": 1, "port": 30002},
         **{f"decode-{n}": {"port": 30002 + 2 * n} for n in range(1, decodes)}},
        router={"timeout": "2m"}, name="memory", timeout=timeout, unit_prefix="sglang-")


class Bringing:
    """An orchestrator over a memory fleet, its events recorded, closed at the end."""

    def __init__(self, *, failures: dict[str, str] | None = None, timeout: str = "10m", verb: Verb = Verb.UP,
                 baseline: dict | None = None, decodes: int = 1, drain: bool = True, force: bool = False,
                 unit_files: dict[str, str] | None = None) -> None:
        self.deployment = deployment(timeout, decodes)
        self.fleet = MemoryFleet(self.deployment, startup=STARTUP, router_startup=2.0, failures=failures)
        for unit, text in (unit_files or {}).items():
            self.fleet.unit_files[("gpu0", unit)] = text
        self.orchestrator = Orchestrator(self.deployment, Registry(self.fleet.host), clock=asyncio.get_running_loop().time,
                                         intent=Intent(verb, drain=drain, force=force), baseline=baseline)
        self.rec = Recorder()
        self.orchestrator.subscribe(self.rec)

    async def __aenter__(self) -> Bringing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.orchestrator.close()
        self.fleet.stop_all()

    async def next_done(self, count: int) -> Done:
        """The ``count``-th Done told (the first is the bring-up's; later ones follow a retry or a crash)."""
        while len(self.rec.of(Done)) < count:
            await asyncio.sleep(1.0)
        return self.rec.of(Done)[count - 1]


async def test_a_bring_up_of_minutes_is_ready_in_the_loops_time_and_starts_the_router_last():
    async with Bringing() as run:
        done = await run.orchestrator.run()
    assert done.ok, done
    assert STARTUP <= done.time_to_ready["decode"] < STARTUP + 5
    starting = run.rec.index("router", "starting")
    assert run.rec.index("prefill", "ready") < starting and run.rec.index("decode", "ready") < starting
    assert run.fleet.counts["http /v1/chat/completions"] >= 1, "the router was proven by a generation"


async def test_the_router_is_looked_at_in_its_start_command_and_enabled_only_once_that_returned(monkeypatch):
    said: list[str] = []
    run = MemoryHost.run

    async def recorded(host, argv, **kwargs):
        if "sglang-router.service" in argv:
            said.append("start and look" if START_AND_SHOW in argv else argv[1])
        return await run(host, argv, **kwargs)

    monkeypatch.setattr(MemoryHost, "run", recorded)
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
    assert said[said.index("start and look"):][:2] == ["start and look", "enable"]


ACTIVATED = "INFO smg::core::steps::worker::shared::activate: Activated 1 worker(s) (marked as healthy)"


@pytest.fixture
def answers_take_a_moment(monkeypatch):
    """Every HTTP answer of the memory hosts comes 10 ms after its request: a probe round takes loop time."""
    read = MemoryConnection.read

    async def later(connection, n=-1):
        await asyncio.sleep(0.01)
        return await read(connection, n)

    monkeypatch.setattr(MemoryConnection, "read", later)


async def test_a_router_whose_workers_activate_while_its_probe_is_answered_is_probed_again_at_once(
        monkeypatch, answers_take_a_moment):
    answer = MemoryHost._http
    activated: list[float] = []

    def activating(host, service, method, path, body):
        answered = answer(host, service, method, path, body)
        if service.cfg.role == "router" and path == "/readiness" and not activated:
            host._do(service, "activate", ACTIVATED)      # ready now: its line comes while the 503 is on its way
            activated.append(asyncio.get_running_loop().time())
        return answered

    monkeypatch.setattr(MemoryHost, "_http", activating)
    ready: list[float] = []
    async with Bringing() as up:
        up.orchestrator.subscribe(lambda e: ready.append(asyncio.get_running_loop().time())
                                  if isinstance(e, ProbeResult) and e.check == "readiness" and e.ok else None)
        assert (await up.orchestrator.run()).ok
    assert ready[0] - activated[0] <= Timing().line_probe_gap + 0.05, "its line brought the next probe, no poll"


async def test_the_lines_a_router_logs_of_pdtuis_own_probes_do_not_bring_its_next_probe_sooner(
        monkeypatch, answers_take_a_moment):
    answer = MemoryHost._http

    def logged(host, service, method, path, body):
        if service.cfg.role == "router":
            host.log(service, f"INFO http_request{{method={method} path={path} version=HTTP/1.1}}: smg::request: "
                              f"src/middleware/logging.rs:170: started processing request")
        return answer(host, service, method, path, body)

    monkeypatch.setattr(MemoryHost, "_http", logged)
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
    waited = up.rec.of(Done)[0].time_to_ready["router"]
    assert up.fleet.counts["http /readiness"] <= waited / Timing().router_poll + 3, "one probe a poll, not one per echo"


async def test_a_backends_own_account_is_read_as_its_http_server_comes_up_and_once(monkeypatch):
    answer = MemoryHost._http
    asked: dict[str, list[float]] = {}

    def recorded(host, service, method, path, body):
        if path.startswith("/server_info"):
            asked.setdefault(service.cfg.name, []).append(asyncio.get_running_loop().time())
        return answer(host, service, method, path, body)

    monkeypatch.setattr(MemoryHost, "_http", recorded)
    serving: dict[str, float] = {}
    async with Bringing() as up:
        up.orchestrator.subscribe(lambda e: serving.setdefault(e.service, asyncio.get_running_loop().time())
                                  if isinstance(e, PhaseStarted) and e.phase == "http" else None)
        assert (await up.orchestrator.run()).ok
    assert set(asked) == {"prefill", "decode"}
    for name, times in asked.items():
        assert len(times) == 1, f"{name}: asked once"
        assert 0 <= times[0] - serving[name] < 0.01, f"{name}: asked at its http line, not a poll later"


async def test_a_ready_unit_that_ends_while_its_health_is_checked_fails_at_once(monkeypatch, answers_take_a_moment):
    answer = MemoryHost._http
    ended: list[float] = []
    watching = asyncio.Event()

    def ending(host, service, method, path, body):
        if service.cfg.name == "decode" and path.startswith(("/health", "/ready")) and watching.is_set() and not ended:
            host._exited(service, 1)        # systemd's lines of its end come while the check is answered
            ended.append(asyncio.get_running_loop().time())
        return answer(host, service, method, path, body)

    monkeypatch.setattr(MemoryHost, "_http", ending)
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
        watching.set()
        while not ended:
            await asyncio.sleep(1.0)
        await asyncio.sleep(1.0)
        assert up.rec.states("decode")[-1] == "failed", "its end woke it: no look on the 10 s beat was waited for"


async def test_every_command_of_the_preflight_is_a_read_and_a_start_is_not(monkeypatch):
    said: list[tuple[str, bool]] = []
    run = MemoryHost.run

    async def recorded(host, argv, *, timeout=None, read_only=False):
        words = argv[2:] if argv[:2] == ["sudo", "-n"] else argv
        said.append((words[3] if words[0] == "sh" else f"{words[0]} {words[1]}", read_only))
        return await run(host, argv, timeout=timeout, read_only=read_only)

    monkeypatch.setattr(MemoryHost, "run", recorded)
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
    preflight = said[:said.index((START_AND_SHOW, False))]
    assert {kind for kind, _ in preflight} >= {"systemctl show", "systemctl cat", "journalctl --output=json",
                                               "pdtui-gpus"}
    assert all(read_only for _, read_only in preflight), "a host's preflight reads share one remote command"
    assert [read_only for kind, read_only in said if kind == START_AND_SHOW] == [False, False]


async def test_a_decode_that_runs_out_of_memory_fails_naming_it_and_blocks_the_router():
    async with Bringing(failures={"decode": "oom"}) as run:
        done = await run.orchestrator.run()
    assert done.exit_code == 1
    failed = run.rec.change("decode", "failed")
    assert failed.reason == "CUDA out of memory" and "OutOfMemoryError" in (failed.line or "")
    assert run.rec.states("router") == ["blocked"]
    assert run.fleet.services["router"].active == "inactive", "the router was never started"
    # The prefill was still loading when the outcome was told: not decided, so not a failure.
    assert done.failures == {"decode": "CUDA out of memory"} and done.blocked == {"router": "decode failed"}
    assert done.waiting == ("prefill",)
    advice = [n.text for n in run.rec.of(Notice) if n.service == "decode" and n.level == "info" and "next:" in n.text]
    assert advice == ["decode: next: lower --mem-fraction-static; a prefill also --chunked-prefill-size, a decode "
                      "--max-running-requests (SGLang's troubleshooting guide)"]


async def test_a_decode_that_dies_of_what_no_signature_knows_fails_naming_the_exception_its_traceback_ended_in():
    async with Bringing(failures={"decode": "crash"}) as run:
        done = await run.orchestrator.run()
    failed = run.rec.change("decode", "failed")
    assert done.exit_code == 1, done
    assert failed.reason == "unit sglang-decode.service failed (exit status 1): RuntimeError: an error no signature knows"
    assert done.failures["decode"] == failed.reason


async def test_a_scheduler_crash_is_told_with_its_ranks_and_the_exception_that_came_a_second_later():
    async with Bringing(failures={"decode": "mooncake"}) as run:
        done = await run.orchestrator.run()
    failed = run.rec.change("decode", "failed")
    assert failed.reason == "scheduler crashed (TP0): RuntimeError: Mooncake memory registration failed.", failed
    assert "Scheduler hit an exception" in (failed.line or "")
    assert done.failures["decode"] == failed.reason and run.rec.states("router") == ["blocked"]


async def test_a_crash_whose_exception_never_comes_is_decided_after_a_bounded_wait():
    async with Bringing(failures={"decode": "silent-crash"}) as run:
        loop = asyncio.get_running_loop()
        done = await run.orchestrator.run()
        decided = loop.time()
    failed = run.rec.change("decode", "failed")
    assert failed.reason == "scheduler crashed", failed
    assert not [n for n in run.rec.of(Notice) if "next:" in n.text], "no source says what to check next"
    header_at = 0.47 * STARTUP
    timing = run.orchestrator.timing
    assert header_at + timing.settle + timing.cause <= done.elapsed < header_at + timing.settle + timing.cause + 2.5
    assert decided < 0.6 * STARTUP, "decided long before its timeout"


async def test_a_retry_after_the_cause_is_fixed_brings_the_rest_up():
    async with Bringing(failures={"decode": "oom"}) as run:
        first = await run.orchestrator.run()
        assert not first.ok
        del run.fleet.failures["decode"]
        assert run.orchestrator.retry("decode")
        done = await run.next_done(2)
    assert done.ok, done
    assert run.rec.states("decode")[-4:] == ["pending", "starting", "waiting", "ready"]
    assert run.rec.states("router")[-4:] == ["pending", "starting", "waiting", "ready"]


def texts(run: Bringing, service: str) -> list[str]:
    return [n.text for n in run.rec.of(Notice) if n.service == service]


async def test_a_restarted_decode_is_drained_through_the_routers_api_while_the_other_serves():
    async with Bringing(decodes=2) as run:
        assert (await run.orchestrator.run()).ok
        router_invocation = run.fleet.services["router"].invocation
        first = len(run.rec.states("router"))
        assert run.orchestrator.restart("decode")
        done = await run.next_done(2)
    assert done.ok, done
    assert run.rec.states("decode")[-4:] == ["pending", "starting", "waiting", "ready"]
    assert run.rec.states("router")[first:] == [], "the router served throughout: never restarted, never waiting"
    assert run.fleet.services["router"].invocation == router_invocation
    assert texts(run, "decode") == [
        "decode: taking it out of router (drain, at most 2m)",
        "decode: out of router, no request left: restarting it",
        "decode: back in router"]
    assert run.fleet.services["router"].removed == set()
    assert not any("only decode" in text for text in texts(run, "router"))


async def test_with_its_only_decode_out_the_router_is_said_to_answer_503_and_serves_again_once_it_is_back():
    async with Bringing() as run:
        assert (await run.orchestrator.run()).ok
        assert run.orchestrator.restart("decode")
        done = await run.next_done(2)
    assert done.ok, done
    assert texts(run, "router")[0] == ("router: decode is its only decode: it answers 503 while decode is out, and "
                                       "serves again once it is back")
    assert "pending" not in run.rec.states("router")[3:]
    assert run.rec.states("router")[-1] == "ready"


async def test_without_drain_a_restarted_decode_sends_the_router_back_to_be_proven_again():
    async with Bringing(drain=False) as run:
        assert (await run.orchestrator.run()).ok
        router_invocation = run.fleet.services["router"].invocation
        assert run.orchestrator.restart("decode")
        done = await run.next_done(2)
    assert done.ok, done
    assert run.rec.states("decode")[-4:] == ["pending", "starting", "waiting", "ready"]
    assert run.rec.states("router")[-3:] == ["pending", "waiting", "ready"]
    assert run.fleet.services["router"].invocation == router_invocation


async def test_a_restart_asked_for_at_once_is_not_drained_and_the_router_is_proven_again():
    async with Bringing(decodes=2) as run:
        assert (await run.orchestrator.run()).ok
        first = len(run.rec.states("router"))
        assert run.orchestrator.restart("decode", RestartHow.NOW)
        done = await run.next_done(2)
    assert done.ok, done
    assert not run.rec.of(Drained) and not texts(run, "decode")
    assert run.rec.states("router")[first:] == ["pending", "waiting", "ready"]


async def test_a_rolling_restart_asked_for_on_one_decode_rolls_its_role_from_it_and_refuses_a_second_roll():
    async with Bringing(decodes=2) as run:
        assert (await run.orchestrator.run()).ok
        before = {name: s.invocation for name, s in run.fleet.services.items()}
        assert run.orchestrator.restart("decode-1", RestartHow.ROLLING)
        assert not run.orchestrator.restart("prefill", RestartHow.ROLLING), "one roll at a time"
        done = await run.next_done(2)
    assert done.ok, done
    after = {name: s.invocation for name, s in run.fleet.services.items()}
    assert [name for name in after if after[name] != before[name]] == ["decode", "decode-1"]
    assert [d.service for d in run.rec.of(Drained)] == ["decode-1", "decode"]
    assert [t for t in texts(run, "decode-1") + texts(run, "decode") if "rolling" in t] == [
        "decode-1: rolling restart, 1 of 2", "decode: rolling restart, 2 of 2"]


async def test_a_drained_decode_whose_pair_fails_after_its_restart_is_left_out_naming_the_pair():
    async with Bringing(decodes=2) as run:
        assert (await run.orchestrator.run()).ok
        run.fleet.broken_pairs.add(("prefill", "decode"))
        assert run.orchestrator.restart("decode")
        done = await run.next_done(2)
    assert not done.ok
    assert done.failures["decode"].startswith("pair prefill → decode failed after its restart: ")
    assert done.failures["decode"].endswith("; left out of router")
    assert run.fleet.services["router"].removed == {"http://127.0.0.1:30002"}
    assert run.rec.states("router")[-1] == "ready", "decode-1 serves on"


async def test_a_hung_decode_is_warned_about_while_it_hangs_and_its_timeout_names_where_it_stopped():
    async with Bringing(failures={"decode": "hang"}, timeout="5m") as run:
        done = await run.orchestrator.run()
    assert done.exit_code == 1 and run.rec.states("decode")[-1] == "timed_out"
    assert 300 <= done.elapsed < 310, "timed out at its timeout, in the loop's time"
    # Silent in CUDA graph capture (from 0:30) for the default quarter of its timeout: told once, long before 5m.
    warned = [n for n in run.rec.of(Notice) if n.service == "decode" and "may be stuck" in n.text]
    assert [n.text for n in warned] == ["decode: no line for 1m15s in CUDA graph capture (since 0:30): it may be "
                                        "stuck; not ready after 5m it fails"]
    assert 30 + 75 <= warned[0].elapsed < 30 + 75 + 3
    assert done.failures["decode"] == "not ready after 300s: stuck in CUDA graph capture since 0:30, no line for 4m30s"
    assert run.fleet.services["router"].active == "inactive"


async def test_a_server_that_says_it_is_stuck_is_warned_about_naming_its_phase():
    async with Bringing(failures={"decode": "watchdog"}, timeout="5m") as run:
        done = await run.orchestrator.run()
    warnings = [n.text for n in run.rec.of(Notice) if n.service == "decode" and n.level == "warning"]
    assert any(text.startswith("decode: the scheduler's watchdog fired (a forward pass or a collective is stuck) in "
                               "CUDA graph capture: ") for text in warnings), warnings
    assert any(text.startswith("decode: SGLang dumped its stacks (py-spy): it found itself stuck in CUDA graph "
                               "capture") for text in warnings), warnings
    assert done.exit_code == 1 and run.rec.states("decode")[-1] == "timed_out", "the timeout decides"


async def test_a_phase_three_times_its_last_successful_length_is_told_while_it_runs_and_only_once():
    # CUDA graph capture runs 15 s here (0.50 to 0.75 of 60 s); last time it took 3 s: slow from 1m (the floor).
    # The hang makes it run on: told once, at 1m, long before the timeout.
    async with Bringing(failures={"decode": "hang"}, timeout="5m", baseline={"decode": {"cuda_graphs": 3.0}}) as run:
        await run.orchestrator.run()
    slow = [n for n in run.rec.of(Notice) if n.service == "decode" and "the last successful run's" in n.text]
    assert [n.text for n in slow] == ["decode: graphs running for 1m, 20.0× the last successful run's 3.0s: it may be "
                                      "stuck"]
    assert 30 + 60 <= slow[0].elapsed < 30 + 61


async def test_a_slow_phase_that_keeps_logging_is_no_stall():
    async with Bringing(timeout="5m") as run:
        done = await run.orchestrator.run()
    assert done.ok and not [n for n in run.rec.of(Notice) if "may be stuck" in n.text]


async def test_status_of_a_running_deployment_attaches_and_starts_nothing():
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
        fleet = up.fleet
        invocations = {name: s.invocation for name, s in fleet.services.items()}
        status = Orchestrator(up.deployment, Registry(fleet.host), clock=asyncio.get_running_loop().time,
                              intent=Intent(Verb.STATUS))
        rec = Recorder()
        status.subscribe(rec)
        try:
            done = await status.run()
        finally:
            await status.close()
    assert done.ok, done
    assert {name: s.invocation for name, s in fleet.services.items()} == invocations
    assert not [n for n in rec.of(Notice) if n.level == "error"]


async def test_a_router_found_running_has_its_workers_listed_once_for_its_missing_backends_and_its_probe():
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
        await up.orchestrator.close()       # its watch asks nothing more
        listed = up.fleet.counts["http /workers"]
        done, _ = await again(up, Intent(Verb.STATUS))
    assert done.ok, done
    assert up.fleet.counts["http /workers"] - listed == 1, "the probe judged the answer its look for missing ones read"


class StillBringup:
    """A bring-up at time 0 in which nothing happens: enough for a run's own arithmetic."""

    smoke = canary = True
    peers: dict = {}
    baseline: dict = {}

    def __init__(self, deployment, timing: Timing) -> None:
        self.deployment, self.timing = deployment, timing

    def clock(self) -> float:
        return 0.0

    elapsed = beat_origin = clock

    def emit(self, event) -> None:
        pass

    def changed(self) -> None:
        pass

    def schedule_flush(self) -> None:
        pass


def test_a_host_whose_looks_are_slow_is_looked_at_on_a_later_beat():
    memory = deployment()
    cfg = memory.services["decode"]
    session = HostSession(memory.hosts[cfg.host], MemoryFleet(memory).host(memory.hosts[cfg.host]), command_timeout=30.0)
    run = UnitRun(cfg, LineJudge(cfg.ready.log, ()))
    run.wire(StillBringup(memory, Timing(unit_poll=2.0)), session)
    assert run.looks.beat(0.1) == 2.0
    session.looker.last_took = 1.0          # a loaded host: the next look no sooner than 4 s after this one
    assert run.looks.beat(0.1) == 6.0


def test_a_look_stays_fresh_as_long_as_the_hosts_looks_are_apart():
    memory = deployment()
    cfg = memory.services["router"]
    session = HostSession(memory.hosts[cfg.host], MemoryFleet(memory).host(memory.hosts[cfg.host]), command_timeout=30.0)
    run = UnitRun(cfg, LineJudge(cfg.ready.log, ()))
    clock = StillBringup(memory, Timing(unit_poll=2.0))
    run.wire(clock, session)
    assert run.looks.is_fresh(-2.9) and not run.looks.is_fresh(-3.1)     # 1.5 beats of 2 s
    session.looker.last_took = 0.5          # a loaded host looks every 2 s + 4 x 0.5 s: its last look is that fresh
    assert run.looks.is_fresh(-5.9) and not run.looks.is_fresh(-6.1)


def test_a_ready_unit_is_looked_at_on_the_slower_beat_its_waiting_peers_share():
    memory = deployment()
    cfg = memory.services["decode"]
    session = HostSession(memory.hosts[cfg.host], MemoryFleet(memory).host(memory.hosts[cfg.host]), command_timeout=30.0)
    run = UnitRun(cfg, LineJudge(cfg.ready.log, ()))
    run.wire(StillBringup(memory, Timing(unit_poll=2.0, unit_watch=10.0)), session)
    assert [run.looks.beat(t) for t in (0.1, 8.5)] == [2.0, 10.0]
    run.state = ServiceState.READY          # systemd's own lines tell its end: the looks are a backstop
    assert [run.looks.beat(t) for t in (0.1, 8.5, 10.0)] == [10.0, 10.0, 20.0]


async def test_a_waiter_on_a_run_wakes_once_at_the_step_its_condition_holds_and_one_that_gave_up_is_let_go():
    memory = deployment()
    cfg = memory.services["decode"]
    run = UnitRun(cfg, LineJudge(cfg.ready.log, ()))
    looked: list[ServiceState] = []

    def ready() -> bool:
        looked.append(run.state)
        return run.state is ServiceState.READY

    waiter = asyncio.create_task(run.reaches(ready))
    impatient = asyncio.create_task(asyncio.wait_for(run.waiters.next_step(), 0.5))
    await asyncio.sleep(1.0)
    with pytest.raises(TimeoutError):
        await impatient
    for state in (ServiceState.STARTING, ServiceState.WAITING, ServiceState.READY):
        assert not waiter.done()
        run.state = state
        run.waiters.stepped()
    await waiter
    assert looked == [ServiceState.PENDING, ServiceState.STARTING, ServiceState.WAITING, ServiceState.READY]
    run.waiters.stepped()
    assert looked[-1] is ServiceState.READY and len(looked) == 4, "a woken waiter is looked at no more"


async def test_a_ready_unit_is_looked_at_on_the_slow_beat_and_its_end_still_fails_it_at_once():
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
        looks = up.fleet.counts["systemctl show"]
        await asyncio.sleep(60.0)
        assert up.fleet.counts["systemctl show"] - looks <= 60.0 / Timing().unit_watch + 1
        decode = up.fleet.services["decode"]
        up.fleet.hosts[decode.cfg.host]._exited(decode, 1)
        ended = asyncio.get_running_loop().time()
        await asyncio.sleep(1.0)
        assert up.rec.states("decode")[-1] == "failed", "systemd's line woke it, no look was waited for"
        assert up.fleet.counts["systemctl show"] - looks <= 60.0 / Timing().unit_watch + 2
    failed = next(e for e in up.rec.of(StateChanged) if e.service == "decode" and e.new is ServiceState.FAILED)
    assert "status=1" in failed.reason or "exit" in failed.reason, failed.reason
    assert ended < asyncio.get_running_loop().time()


async def test_a_decode_that_fails_after_ready_leaves_the_steps_as_they_were_and_the_outcome_says_when():
    printed = io.StringIO()
    async with Bringing() as up:
        up.orchestrator.subscribe(LinePrinter(out=printed))
        first = await up.orchestrator.run()
        steps = up.rec.of(StepChanged)
        await asyncio.sleep(60.0)
        decode = up.fleet.services["decode"]
        up.fleet.hosts[decode.cfg.host]._exited(decode, 1)
        second = await up.next_done(2)
    ready = [e for e in steps if e.step is Step.DONE and e.status is StepStatus.DONE]
    assert first.ok and len(ready) == 1 and first.ready_at == ready[0].elapsed and first.failed_at is None
    assert up.rec.of(StepChanged) == steps, "no step told again: each keeps the status and the time it was told"
    assert {e.step: e.status for e in steps} == dict.fromkeys(Step, StepStatus.DONE)
    failed = up.rec.change("decode", "failed")
    assert not second.ok and second.failures == {"decode": failed.reason}
    assert second.ready_at == first.ready_at and second.failed_at == failed.elapsed
    assert second.failed_at - second.ready_at >= 60.0 and second.failed_at <= second.elapsed
    told = json.loads(to_json(second))
    assert (told["ready_at"], told["failed_at"]) == (second.ready_at, second.failed_at)
    lines = printed.getvalue().splitlines()
    assert [line for line in lines if "✗" in line] == [
        f"[{second.elapsed:7.1f}s] ✗ ready at {second.ready_at:.1f}s · failed "
        f"{round(second.failed_at, 1) - round(second.ready_at, 1):.1f}s later, at {second.failed_at:.1f}s"]


async def test_a_retry_after_a_failure_after_ready_tells_the_steps_again_and_its_own_readiness():
    async with Bringing() as up:
        first = await up.orchestrator.run()
        decode = up.fleet.services["decode"]
        up.fleet.hosts[decode.cfg.host]._exited(decode, 1)
        await up.next_done(2)
        told = len(up.rec.of(StepChanged))
        assert up.orchestrator.retry("decode")
        third = await up.next_done(3)
    again = up.rec.of(StepChanged)[told:]
    assert (Step.WAIT_READY, StepStatus.RUNNING) in [(e.step, e.status) for e in again], "a new attempt is told"
    assert again[-1].step is Step.DONE and again[-1].status is StepStatus.DONE
    assert set(third.failures) <= {"router"}, third     # its canary failed while decode was down (ready again later)
    assert third.ready_at == again[-1].elapsed > first.ready_at and third.failed_at is None


async def again(up: Bringing, intent: Intent) -> tuple[Done, Recorder]:
    """A second command on the deployment ``up`` brought up: a second orchestrator, as the command line's."""
    orchestrator = Orchestrator(up.deployment, Registry(up.fleet.host), clock=asyncio.get_running_loop().time, intent=intent)
    rec = Recorder()
    orchestrator.subscribe(rec)
    try:
        return await orchestrator.run(), rec
    finally:
        await orchestrator.close()


async def test_a_rolling_restart_takes_one_decode_out_at_a_time_and_the_router_serves_throughout():
    async with Bringing(decodes=2) as up:
        assert (await up.orchestrator.run()).ok
        before = {name: s.invocation for name, s in up.fleet.services.items()}
        done, rec = await again(up, Intent(Verb.RESTART, ("decode", "decode-1"), rolling=True))
    assert done.ok, done
    after = {name: s.invocation for name, s in up.fleet.services.items()}
    assert [name for name in after if after[name] != before[name]] == ["decode", "decode-1"]
    said = [n.text for n in rec.of(Notice) if n.service in ("decode", "decode-1")]
    assert said.index("decode: back in router") < said.index("decode-1: taking it out of router (drain, at most 2m)")
    assert [t for t in said if "rolling" in t] == ["decode: rolling restart, 1 of 2", "decode-1: rolling restart, 2 of 2"]
    assert rec.states("router") == ["waiting", "ready"], "judged once, then serving throughout"
    drains = rec.of(Drained)
    assert [(d.service, d.routers, d.outcome, d.cut) for d in drains] == [("decode", ("router",), "back", 0),
                                                                          ("decode-1", ("router",), "back", 0)]
    assert all(d.out_for is not None and d.idle_after is not None and d.out_for > d.idle_after for d in drains)


async def test_a_rolling_restart_stops_at_a_decode_that_does_not_come_back_and_leaves_the_next_as_it_runs():
    async with Bringing(decodes=2) as up:
        assert (await up.orchestrator.run()).ok
        before = up.fleet.services["decode-1"].invocation
        up.fleet.failures["decode"] = "oom"
        done, rec = await again(up, Intent(Verb.RESTART, ("decode", "decode-1"), rolling=True))
    assert not done.ok and done.failures == {"decode": "CUDA out of memory"}
    assert up.fleet.services["decode-1"].invocation == before
    said = [n.text for n in rec.of(Notice) if n.level == "error"]
    assert said == ["decode: failed after its restart: left out of router",
                    "rolling restart stopped at decode (failed): decode-1 left as it runs"]


async def test_a_rolling_restart_of_a_prefill_says_its_decodes_keep_its_endpoints_before_it_begins():
    async with Bringing(decodes=2) as up:
        assert (await up.orchestrator.run()).ok
        done, rec = await again(up, Intent(Verb.RESTART, ("prefill",), rolling=True))
    assert done.ok, done
    said = [n.text for n in rec.of(Notice) if n.service == "prefill" and "GPUs" not in n.text]
    assert said[0].startswith("prefill: rolling restart of a prefill: SGLang's decode keeps the transfer endpoints")
    assert "(--with-dependents restarts decode, decode-1 in turn)" in said[0]
    assert said[1:3] == ["prefill: rolling restart, 1 of 1", "prefill: taking it out of router (drain, at most 2m)"]


async def test_a_rolling_restart_of_a_prefill_with_dependents_restarts_its_decodes_before_it_goes_back():
    async with Bringing(decodes=2) as up:
        assert (await up.orchestrator.run()).ok
        before = {name: s.invocation for name, s in up.fleet.services.items()}
        done, rec = await again(up, Intent(Verb.RESTART, ("prefill",), rolling=True, with_dependents=True))
    assert done.ok, done
    after = {name: s.invocation for name, s in up.fleet.services.items()}
    assert [name for name in after if after[name] != before[name]] == ["prefill", "decode", "decode-1"]
    said = [n.text for n in rec.of(Notice) if "GPUs" not in n.text]
    assert said[0].endswith("so decode, decode-1 restart in turn after it, before it goes back in")
    order = [said.index(text) for text in (
        "prefill: taking it out of router (drain, at most 2m)",
        "decode: restarted after prefill (--with-dependents), before prefill goes back in",
        "decode: back in router",
        "decode-1: restarted after prefill (--with-dependents), before prefill goes back in",
        "decode-1: back in router",
        "prefill: back in router")]
    assert order == sorted(order), said
    assert rec.states("router")[0] == "waiting" and "stopping" not in rec.states("router"), "never restarted"


async def test_down_of_one_decode_drains_it_out_of_the_router_and_stops_it_alone():
    async with Bringing(decodes=2) as up:
        assert (await up.orchestrator.run()).ok
        done, rec = await again(up, Intent(Verb.DOWN, ("decode-1",)))
        running = {name: s.active for name, s in up.fleet.services.items()}
    assert done.ok, done
    assert running == {"prefill": "active", "decode": "active", "decode-1": "inactive", "router": "active"}
    assert [(d.service, d.outcome, d.out_for) for d in rec.of(Drained)] == [("decode-1", "stopped", None)]
    assert rec.states("decode-1")[-2:] == ["stopping", "stopped"]
    assert rec.states("router") == ["waiting", "ready"], "judged, then serving throughout"
    said = [n.text for n in rec.of(Notice) if n.service == "decode-1"]
    assert said[-2:] == ["decode-1: taking it out of router (drain, at most 2m)",
                         "decode-1: out of router, no request left: stopping it"]
    assert up.fleet.services["router"].removed == {"http://127.0.0.1:30004"}


async def test_down_of_one_decode_without_drain_says_the_router_runs_without_it():
    async with Bringing(decodes=2) as up:
        assert (await up.orchestrator.run()).ok
        done, rec = await again(up, Intent(Verb.DOWN, ("decode-1",), drain=False))
        running = {name: s.active for name, s in up.fleet.services.items()}
    assert done.ok, done
    assert running == {"prefill": "active", "decode": "active", "decode-1": "inactive", "router": "active"}
    assert not rec.of(Drained)
    assert up.fleet.services["router"].removed == set()
    assert [n.text for n in rec.of(Notice) if n.service == "router"] == ["router degraded: decode-1 is being stopped"]


async def test_a_stop_from_the_screen_drains_the_decode_out_of_the_router_first():
    async with Bringing(decodes=2) as run:
        assert (await run.orchestrator.run()).ok
        assert run.orchestrator.stop("decode-1")
        assert not run.orchestrator.stop("decode-1"), "draining already: not again"
        done = await run.next_done(2)
        removed = set(run.fleet.services["router"].removed)
    assert done.failures == {"decode-1": "stopped"}
    assert run.rec.states("decode-1")[-2:] == ["stopping", "stopped"]
    assert removed == {"http://127.0.0.1:30004"} and run.rec.states("router")[-1] == "ready"
    said = [n.text for n in run.rec.of(Notice) if n.service == "decode-1"]
    assert said[-2:] == ["decode-1: taking it out of router (drain, at most 2m)",
                         "decode-1: out of router, no request left: stopping it"]


def server_unit(role: str, port: int, gpus: str, *flags: str) -> str:
    return ("[Service]\n" f"Environment=CUDA_VISIBLE_DEVICES={gpus}\n"
            f"ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 "
            f"--port {port} --disaggregation-mode {role} {' '.join(flags)}\n")


PAGE_SIZES = {"sglang-prefill.service": server_unit("prefill", 30000, "0,1,2,3", "--page-size", "64"),
              "sglang-decode.service": server_unit("decode", 30002, "4,5,6,7", "--page-size", "128")}


async def test_a_prefill_and_a_decode_with_two_page_sizes_are_refused_before_anything_starts():
    async with Bringing(unit_files=PAGE_SIZES) as run:
        done = await run.orchestrator.run()
        started = {name: s.active for name, s in run.fleet.services.items()}
    assert not done.ok
    assert set(started.values()) == {"inactive"}, "nothing started"
    [finding] = run.rec.of(PreflightFinding)
    assert (finding.level, finding.check, finding.service, finding.host, finding.values) == (
        "error", "pair", "decode", "gpu0", ("64", "128"))
    assert finding.sources == ("its unit sglang-prefill.service on gpu0", "its unit sglang-decode.service on gpu0")
    assert done.failures["decode"] == done.failures["prefill"] == finding.text
    assert {k: v for k, v in json.loads(to_json(finding)).items() if k in ("kind", "check", "values")} == {
        "kind": "preflight", "check": "pair", "values": ["64", "128"]}


async def test_a_unit_that_runs_another_port_than_the_config_says_refuses_the_command_and_nothing_starts():
    units = {"sglang-prefill.service": server_unit("prefill", 30000, "0,1,2,3"),
             "sglang-decode.service": server_unit("decode", 1, "4,5,6,7")}
    async with Bringing(unit_files=units) as run:
        done = await run.orchestrator.run()
    assert done.failures == {"decode": "its unit listens on port 1 (--port), the config says 30002"}
    assert done.blocked == dict.fromkeys(("prefill", "router"), "the preflight refused the servers as they would run")
    assert run.rec.states("prefill") == ["blocked"] and run.rec.states("router") == ["blocked"]
    assert run.fleet.counts[f"sh {START_AND_SHOW}"] == 0, "nothing was started"
    steps = {e.step: e.status for e in run.rec.of(StepChanged)}      # the last of each
    assert steps == {Step.PREFLIGHT: StepStatus.FAILED, Step.START_BACKENDS: StepStatus.SKIPPED,
                     Step.WAIT_READY: StepStatus.SKIPPED, Step.START_ROUTER: StepStatus.SKIPPED,
                     Step.PROBE_ROUTER: StepStatus.SKIPPED, Step.DONE: StepStatus.FAILED}, steps


async def test_force_starts_despite_a_refusal_and_says_what_it_overrode():
    async with Bringing(unit_files=PAGE_SIZES, force=True) as run:
        done = await run.orchestrator.run()
    assert done.ok, done
    said = [n.text for n in run.rec.of(Notice) if n.text.startswith("--force")]
    assert said == ["--force: starting despite this: prefill and decode disagree on --page-size: prefill runs 64 "
                    "(its unit sglang-prefill.service on gpu0), decode runs 128 (its unit sglang-decode.service on gpu0)"]


async def test_strict_refuses_a_warning_too():
    units = {"sglang-prefill.service": server_unit("prefill", 30000, "0,1,2,3", "--page-size", "64"),
             "sglang-decode.service": server_unit("decode", 30002, "4,5,6,7")}
    async with Bringing(unit_files=units) as run:
        assert (await run.orchestrator.run()).ok, "a warning alone starts"
        [finding] = run.rec.of(PreflightFinding)
        assert finding.level == "warning"
    async with Bringing(unit_files=units) as run:
        run.deployment = run.deployment.model_copy(update={"strict": True})
        strict = Orchestrator(run.deployment, Registry(run.fleet.host), clock=asyncio.get_running_loop().time)
        try:
            done = await strict.run()
        finally:
            await strict.close()
    assert not done.ok and "only prefill gives it" in done.failures["decode"]


async def test_a_run_that_ends_on_an_unexpected_exception_fails_its_service_instead_of_waiting_for_ever():
    async def boom(action) -> bool:
        raise RuntimeError("boom")

    async with Bringing() as run:
        run.orchestrator._runs["decode"].bring_up = boom      # a bug in a target's run, as it would surface
        done = await run.orchestrator.run()
    assert not done.ok
    assert done.failures["decode"] == "pdtui internal error: RuntimeError: boom"
    assert run.rec.states("router")[-1] == "blocked"


async def test_a_restart_refused_by_the_preflight_leaves_what_it_does_not_restart_as_it_runs():
    async with Bringing(unit_files=PAGE_SIZES, force=True) as up:
        assert (await up.orchestrator.run()).ok
        before = {name: s.invocation for name, s in up.fleet.services.items()}
        done, rec = await again(up, Intent(Verb.RESTART, ("decode",)))
        after = {name: s.invocation for name, s in up.fleet.services.items()}
    assert after == before, "nothing restarted"
    assert done.failures == {"decode": rec.of(PreflightFinding)[0].text}
    assert rec.states("prefill")[-1] == rec.states("router")[-1] == "ready"


async def test_a_short_timeout_is_warned_about_before_it_runs_out_and_names_where_it_stopped():
    async with Bringing(failures={"decode": "hang"}, timeout="80s") as run:
        done = await run.orchestrator.run()
    assert run.rec.states("decode")[-1] == "timed_out"
    # Half the timeout: a minute's silence from 0:30 would come after the deadline.
    warned = [n for n in run.rec.of(Notice) if n.service == "decode" and "may be stuck" in n.text]
    assert [n.text for n in warned] == ["decode: no line for 40s in CUDA graph capture (since 0:30): it may be "
                                        "stuck; not ready after 1m20s it fails"]
    assert 30 + 40 <= warned[0].elapsed < 80
    assert done.failures["decode"].startswith("not ready after 80s: ")
    assert "CUDA graph capture since 0:30, no line for " in done.failures["decode"]


async def test_a_look_its_host_answers_too_late_is_told_once_and_looked_at_again_not_failed():
    async with Bringing() as up:
        bringing = asyncio.create_task(up.orchestrator.run())
        while "waiting" not in up.rec.states("decode"):
            await asyncio.sleep(1.0)
        up.fleet.stalls["systemctl show"] = 2     # two looks in a row hang until the command timeout stops them
        done = await bringing
    assert done.ok, done
    assert up.fleet.stalls["systemctl show"] == 0, "both looks hung"
    late = [(n.service, n.level, n.text) for n in up.rec.of(Notice) if "did not finish" in n.text]
    assert late == [(name, "warning", "gpu0: systemctl did not finish within 30s: it is looked at again on its beat "
                                      "(a loaded host answers late)") for name in ("prefill", "decode")], late


async def test_a_start_still_under_way_at_the_deadline_times_the_service_out():
    async with Bringing(timeout="3m") as up:
        up.fleet.stalls[f"sh {START_AND_SHOW}"] = 1     # the backends' one start hangs until its deadline
        done = await up.orchestrator.run()
    assert up.fleet.stalls[f"sh {START_AND_SHOW}"] == 0, "the start hung"
    for name in ("prefill", "decode"):
        timed_out = up.rec.change(name, "timed_out")
        assert timed_out.reason == (f"not ready after 180s: systemctl start sglang-{name}.service had not returned "
                                    "(its start job was still running)"), timed_out
    assert done.exit_code == 1 and up.rec.states("router") == ["blocked"], done


async def test_the_plan_names_the_config_file_the_deployment_was_read_from():
    async with Bringing() as run:
        await run.orchestrator.preflight()
    assert run.rec.events[0].config == run.deployment.source != ""


GENERATING = {"/health", "/health_generate", "/generate", "/v1/completions", "/v1/chat/completions"}   # SGLang's


@pytest.mark.parametrize("verb", [Verb.UP, Verb.STATUS])
async def test_watching_a_ready_deployment_asks_each_server_a_few_quiet_requests_a_minute_and_generates_only_the_canary(
        monkeypatch, verb):
    """What pdtui costs the servers while it watches them, as the TUI does (every server's figures shown): counted
    by server and path over ten minutes of the loop's time, after ``up`` and in a ``status`` that attached."""
    answer = MemoryHost._http
    asked: list[tuple[float, str, str, str]] = []

    def counted(host, service, method, path, body):
        asked.append((asyncio.get_running_loop().time(), service.cfg.name, method, path.partition("?")[0]))
        return answer(host, service, method, path, body)

    monkeypatch.setattr(MemoryHost, "_http", counted)
    timing, minutes = Timing(), 10
    async with Bringing() as up:
        assert (await up.orchestrator.run()).ok
        watching = up.orchestrator
        if verb is Verb.STATUS:
            await up.orchestrator.close()
            watching = Orchestrator(up.deployment, Registry(up.fleet.host), clock=asyncio.get_running_loop().time,
                                    intent=Intent(Verb.STATUS))
            assert (await watching.run()).ok
        watching.show_figures(list(up.deployment.services))
        since = asyncio.get_running_loop().time()
        await asyncio.sleep(minutes * 60)
        await watching.close()
    seen = Counter((name, method, path) for at, name, method, path in asked if at >= since)
    for name in ("prefill", "decode"):
        mine = {(method, path): n for (server, method, path), n in seen.items() if server == name}
        assert set(mine) == {("GET", "/ready"), ("GET", "/metrics")}, mine       # none of them generates
        assert mine["GET", "/ready"] <= minutes * (60 / timing.watch_poll + 1)
        assert mine["GET", "/metrics"] <= minutes * (60 / timing.figures_poll + 1)
    router = {(method, path): n for (server, method, path), n in seen.items() if server == "router"}
    canaries = router.pop(("POST", "/v1/chat/completions"))
    assert abs(canaries - minutes * 60 / up.deployment.services["router"].canary) <= 1, canaries
    assert not {path for _, path in router} & GENERATING, router
