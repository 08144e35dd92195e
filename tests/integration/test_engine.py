"""The bring-up engine against the simulated deployment on this machine."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import sys

import pytest

from pdtui.engine.events import Done, LineKind, LogLines, Notice, ProbeResult, Step, StepChanged, StepStatus
from pdtui.engine.orchestrator import Orchestrator, Timing
from pdtui.hosts import make_host
from pdtui.sim.ports import free_port
from pdtui.targets.registry import Registry
from tests.engine_helpers import (
    FAST,
    READY_WITHIN,
    Recorder,
    bring_up,
    reference,
    run_to_done,
    sim_deployment,
    until_it_fails,
    until_told,
    worker_argv,
)


def unit_show(sandbox, unit: str) -> dict[str, str]:
    out = subprocess.run([*sandbox.commands["systemctl"], "show", "-p", "ActiveState,InvocationID", unit],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


async def test_all_ready_router_started_only_after_both_backends(sandbox):
    done, rec, _ = await bring_up(reference(sandbox))
    assert done.ok and done.exit_code == 0, done
    assert set(done.time_to_ready) == {"prefill", "decode", "router"}
    router_starting = rec.index("router", "starting")
    assert rec.index("prefill", "ready") < router_starting
    assert rec.index("decode", "ready") < router_starting
    smoke = [e for e in rec.events if getattr(e, "check", None) == "smoke" and e.ok]
    assert smoke and smoke[0].detail.startswith("4 tokens in ")
    steps = {(e.step, e.status) for e in rec.of(StepChanged)}
    assert (Step.DONE, StepStatus.DONE) in steps and (Step.PROBE_ROUTER, StepStatus.DONE) in steps


async def test_oom_fails_decode_blocks_router_and_never_starts_it(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, failures={"decode": "oom"}))
    assert not done.ok and done.exit_code == 1
    failed = rec.change("decode", "failed")
    assert failed.reason == "CUDA out of memory"
    assert "CUDA out of memory" in failed.line
    assert rec.states("router") == ["blocked"]
    assert unit_show(sandbox, "sglang-dsv4-router.service")["InvocationID"] == ""
    fail_lines = [r for e in rec.of(LogLines) if e.service == "decode" for r in e.lines if r.kind is LineKind.FAIL]
    assert fail_lines


async def test_a_scheduler_crash_is_named_by_the_exception_its_traceback_ends_in(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, failures={"decode": "mooncake"}))
    assert done.exit_code == 1
    reason = "scheduler crashed (TP0): RuntimeError: Mooncake memory registration failed."
    assert rec.change("decode", "failed").reason == reason and done.failures["decode"] == reason
    assert rec.states("router") == ["blocked"]


async def test_a_crash_no_signature_knows_is_named_by_its_exception_when_the_unit_dies(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, failures={"decode": "crash"}))
    failed = rec.change("decode", "failed")
    # The demo's units restart on failure (systemd waits its RestartSec): the unit's end, then the exception.
    assert failed.reason.startswith("unit sglang-dsv4-decode.service ended (exit status 1); systemd restarts it")
    assert failed.reason.endswith("): ValueError: the sim's model config names an attention backend this build does "
                                  "not have"), failed
    assert rec.states("router") == ["blocked"]


@pytest.mark.parametrize(("mode", "phase"), [("hang-dist", "distributed init"), ("hang-warmup", "the PD warm-up")])
async def test_a_server_silent_in_a_phase_known_to_hang_is_warned_about_and_its_timeout_says_where(sandbox, mode,
                                                                                                  phase):
    """The timeout leaves the worker 10 s to reach the phase and stall there for 2 s. A worker that reaches it with
    less than 2 s left is rightly never warned about: with a 5 s timeout, one suite run loaded by real servers
    timed it out unwarned. A loaded machine may also keep its first line over 2 s: that silence is a stall of its
    own, told beside the phase's."""
    port = free_port()
    argv = worker_argv("decode", port, bootstrap=free_port(), startup=0.4, fail=mode)
    deployment = sim_deployment(sandbox, {"decode": (argv, {"role": "decode", "port": port, "timeout": "12s",
                                                            "stall_after": "2s"})})
    done, rec, _ = await bring_up(deployment)
    assert rec.states("decode")[-1] == "timed_out"
    warned = [n.text for n in rec.of(Notice) if n.service == "decode" and "may be stuck" in n.text]
    assert [w for w in warned if f" in {phase} (since " in w] and len(set(warned)) == len(warned), warned
    assert done.failures["decode"].startswith(f"not ready after 12s: stuck in {phase} since "), done


async def test_ready_line_after_failed_pd_warmup_is_not_ready(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, failures={"prefill": "warmup-failed"}))
    assert "ready" not in rec.states("prefill")
    failed = rec.change("prefill", "failed")
    assert failed.reason == "PD warm-up failed" and "Disaggregation warmup failed" in failed.line
    ready_lines = [r for e in rec.of(LogLines) if e.service == "prefill" for r in e.lines
                   if "fired up and ready" in r.text]
    assert ready_lines, "the sim printed its ready line anyway"
    assert rec.states("router") == ["blocked"]


class LateLines:
    """A journal follower whose lines come ``delay`` seconds late, as a real journald hands them over: each batch
    ``delay`` after it was read, however many came before it (a sleep per batch in the reading loop would add the
    delays up, the tenth batch ten delays late)."""

    def __init__(self, lines, delay: float) -> None:
        self._lines, self._delay = lines, delay

    async def _late(self):
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        async def read() -> None:
            async for batch in self._lines.batches():
                queue.put_nowait((loop.time() + self._delay, batch))
            queue.put_nowait(None)
        reader = asyncio.create_task(read())
        try:
            while (item := await queue.get()) is not None:
                due, batch = item
                await asyncio.sleep(due - loop.time())
                yield batch
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    def batches(self):
        return self._late()

    def __getattr__(self, name):
        return getattr(self._lines, name)


def late_journal(delay: float):
    """A host factory whose ``journalctl --follow`` hands lines over ``delay`` seconds after they were written."""
    def factory(config, **options):
        host = make_host(config, **options)
        stream = host.stream

        @contextlib.asynccontextmanager
        async def late(argv):
            async with stream(argv) as lines:
                yield LateLines(lines, delay) if "--follow" in argv else lines
        host.stream = late
        return host
    return factory


async def test_a_unit_seen_dead_before_its_last_lines_came_is_failed_by_those_lines(sandbox):
    orchestrator = Orchestrator(reference(sandbox, failures={"decode": "nccl"}), Registry(late_journal(1.2)), timing=FAST)
    done, rec = await run_to_done(orchestrator)
    assert done.exit_code == 1
    failed = rec.change("decode", "failed")
    assert "NCCL" in (failed.line or ""), failed


async def test_stale_ready_line_from_an_earlier_invocation_is_ignored(sandbox):
    first, _, _ = await bring_up(reference(sandbox))
    assert first.ok
    sandbox.stop_all()
    # The same units again, decode now a server that never gets ready; the journal
    # still holds the ready line of its earlier run.
    # The timeout leaves a loaded machine time to start the stand-in and show its lines (4 s once saw none).
    deployment = reference(sandbox, failures={"decode": "hang"}, timeout="20s")
    journal = subprocess.run([*sandbox.commands["journalctl"], "-u", "sglang-dsv4-decode", "-o", "cat"],
                             capture_output=True, text=True, check=True).stdout
    assert "fired up and ready" in journal
    done, rec, _ = await bring_up(deployment)
    assert rec.states("decode") == ["starting", "waiting", "timed_out"]
    # silent for half its timeout: stuck
    assert rec.change("decode", "timed_out").reason.startswith("not ready after 20s: stuck in CUDA graph capture since ")
    assert rec.states("router") == ["blocked"]


async def test_hang_times_out_and_blocks_dependents(sandbox):
    done, rec, _ = await bring_up(reference(sandbox, failures={"prefill": "hang"}, timeout="2s"))
    assert not done.ok
    assert rec.states("prefill")[-1] == "timed_out"
    assert rec.states("router") == ["blocked"]
    assert "prefill timed out" in rec.change("router", "blocked").reason
    assert done.failures["prefill"].startswith("not ready after 2s")


async def test_crash_after_ready_fails_the_service_while_watching(sandbox):
    # The bring-up may have ended either way; the watch goes on after it. The new outcome is told once the
    # waiters have looked again (a loop turn or two after the failure).
    recorder = await until_it_fails(reference(sandbox, failures={"decode": "crash-after-ready"}), "decode")
    assert recorder.states("decode")[-2:] == ["ready", "failed"]
    failed = recorder.change("decode", "failed")
    assert failed.reason.startswith("after ready")
    assert recorder.of(Done)[-1].ok is False, "the outcome is told again after the crash"


async def test_missing_unit_fails_preflight(sandbox):
    deployment = reference(sandbox)
    (sandbox.root / "units" / "sglang-dsv4-decode.service").unlink()
    done, rec, _ = await bring_up(deployment)
    assert rec.states("decode") == ["failed"]
    assert "not found" in rec.change("decode", "failed").reason
    assert rec.states("router") == ["blocked"]
    assert (Step.PREFLIGHT, StepStatus.FAILED) in {(e.step, e.status) for e in rec.of(StepChanged)}


async def test_retry_after_a_fix_brings_the_rest_up(sandbox):
    recorder = Recorder()
    deployment = reference(sandbox, failures={"decode": "oom"})
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    try:
        first = await orchestrator.run()
        assert not first.ok and orchestrator.retry("prefill") is False
        # The operator fixes the unit, then retries decode: the blocked router follows.
        decode_port = deployment.services["decode"].port
        argv = [a for a in _unit_argv(sandbox, "sglang-dsv4-decode") if a not in ("--fail", "oom")]
        sandbox.add_unit("sglang-dsv4-decode", argv)
        assert orchestrator.retry("decode") is True
        async with asyncio.timeout(30):
            while len(recorder.of(Done)) < 2:
                await asyncio.sleep(0.05)
    finally:
        await orchestrator.close()
    assert recorder.of(Done)[-1].ok
    assert recorder.states("decode")[-4:] == ["pending", "starting", "waiting", "ready"]
    assert recorder.states("router") == ["blocked", "pending", "starting", "waiting", "ready"]
    assert str(decode_port) in " ".join(argv)


def _unit_argv(sandbox, name: str) -> list[str]:
    import configparser
    import shlex
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(sandbox.root / "units" / f"{name}.service")
    return shlex.split(parser["Service"]["ExecStart"])


async def test_replaced_units_are_stopped_and_disabled_first(sandbox):
    import yaml

    from pdtui.config import parse_config
    old = sandbox.add_unit("sglang-dsv4", ["sleep", "600"])
    subprocess.run([*sandbox.commands["systemctl"], "enable", "--now", old], check=True)
    assert unit_show(sandbox, old)["ActiveState"] == "active"
    deployment = reference(sandbox)
    config = yaml.safe_load(open(deployment.source))
    config["services"]["prefill"]["replaces"] = ["sglang-dsv4"]
    done, rec, _ = await bring_up(parse_config(yaml.safe_dump(config), deployment.source))
    assert done.ok
    assert unit_show(sandbox, old)["ActiveState"] in ("inactive", "failed")
    enabled = subprocess.run([*sandbox.commands["systemctl"], "is-enabled", old], capture_output=True, text=True)
    assert enabled.stdout.strip() == "disabled"
    notices = [e.text for e in rec.of(Notice)]
    assert "stopped and disabled sglang-dsv4.service" in notices


def _recording_hosts(asked: list[list[str]]):
    """A host factory whose hosts note every argv they run."""
    def factory(config, **options):
        host = make_host(config, **options)
        run = host.run

        async def recording(argv, *, timeout=None, read_only=False):
            asked.append(list(argv))
            return await run(argv, timeout=timeout, read_only=read_only)
        host.run = recording
        return host
    return factory


async def test_a_unit_started_after_the_tail_found_its_place_needs_no_history_and_loses_no_line(sandbox):
    early, late = free_port(), free_port()
    deployment = sim_deployment(sandbox, {
        "early": (worker_argv("prefill", early, bootstrap=free_port()), {"role": "prefill", "port": early}),
        "late": (worker_argv("decode", late, bootstrap=free_port()), {"role": "decode", "port": late, "after": ["early"]}),
    })
    asked: list[list[str]] = []
    orchestrator = Orchestrator(deployment, Registry(_recording_hosts(asked)), timing=FAST)
    try:
        done = await orchestrator.run()
    finally:
        await orchestrator.close()
    assert done.ok, done    # late's ready line came through the tail alone
    show = [*sandbox.commands["systemctl"], "show", "-p", "InvocationID", deployment.services["late"].unit]
    late_invocation = subprocess.run(show, capture_output=True, text=True, check=True).stdout.strip().partition("=")[2]
    assert late_invocation
    histories = [[w for w in argv if w.startswith("_SYSTEMD_INVOCATION_ID=")] for argv in asked
                 if "--output=json" in argv and "--follow" not in argv and "--lines=1" not in argv]
    # The tail finds its place during the preflight: early's start reads a history only if it had not yet.
    assert len(histories) <= 1 and all(len(h) == 1 for h in histories)
    assert f"_SYSTEMD_INVOCATION_ID={late_invocation}" not in [w for h in histories for w in h]


async def test_a_service_logging_while_probed_is_probed_again_without_waiting_for_the_poll(sandbox):
    port = free_port()
    ready = {"log": None, "http": "/health"}
    deployment = sim_deployment(sandbox, {"decode": (worker_argv("decode", port, bootstrap=free_port(), startup=2.0),
                                                     {"role": "decode", "port": port, "timeout": READY_WITHIN, "ready": ready})})
    slow_poll = Timing(poll=600, unit_poll=0.5, settle=0.2, log_batch=0.02)
    done, rec, _ = await bring_up(deployment, timing=slow_poll)
    assert done.ok, done
    first = next(e for e in rec.of(ProbeResult) if e.service == "decode")
    assert not first.ok, "probed once before /health turned 200: the next probe came from a line, not the poll"


async def test_the_gpu_inventory_is_taken_while_the_units_are_looked_at(sandbox):
    order: list[str] = []

    def factory(config, **options):
        host = make_host(config, **options)
        run = host.run

        async def noting(argv, *, timeout=None, read_only=False):
            kind = "nvidia-smi" if any("nvidia_smi" in a for a in argv) else "show" if "show" in argv else argv[-1]
            order.append(f"start {kind}")
            try:
                return await run(argv, timeout=timeout, read_only=read_only)
            finally:
                order.append(f"end {kind}")
        host.run = noting
        return host
    orchestrator = Orchestrator(reference(sandbox), Registry(factory), timing=FAST)
    try:
        assert await orchestrator.preflight()
    finally:
        await orchestrator.close()
    assert order.index("start nvidia-smi") < order.index("end show")


async def test_a_killed_scheduler_fails_its_decode_after_ready_naming_what_0_5_23_says(sandbox):
    recorder = await until_it_fails(reference(sandbox, failures={"decode": "scheduler-killed"}), "decode")
    failed = recorder.change("decode", "failed")
    assert failed.reason == "after ready: a server process died", failed
    assert "Subprocess scheduler_0" in (failed.line or "") and "crashed with exit code -9" in (failed.line or "")


async def test_a_decode_with_a_small_kv_pool_times_out_in_its_warm_up_quoting_the_warning(sandbox):
    # 10 s: its sim worker reaches the warm-up in under a second alone; a loaded run saw it still in kv after 3 s
    done, rec, _ = await bring_up(reference(sandbox, failures={"decode": "small-kv-pool"}, timeout="10s"))
    timed_out = rec.change("decode", "timed_out")
    assert re.match(r"not ready after 10s: (stuck )?in the PD warm-up since ", timed_out.reason), timed_out
    assert "KV pool holds 64 tokens, fewer than --context-length" in (timed_out.line or ""), timed_out
    assert rec.states("router") == ["blocked"] and done.exit_code == 1
    [stall] = [n.text for n in rec.of(Notice) if "it may be stuck" in n.text]
    assert re.match(r"decode: no line for \d+s in the PD warm-up .*; its last warning: .*KV pool holds 64 tokens", stall), stall


async def test_a_config_pattern_whose_search_runs_past_its_bound_is_told_once_naming_it(sandbox, monkeypatch):
    """A config's fail: pattern is searched with a bound on time (a bound of nothing here, so that any search on a
    long line runs past it): the line is judged without it, and a warning names the pattern, once."""
    monkeypatch.setattr("pdtui.config.regex.SEARCH_LIMIT", 0)
    program = "import time; [print('x' * 100_000, flush=True) for _ in range(3)]; time.sleep(60)"
    deployment = sim_deployment(sandbox, {"noisy": ([sys.executable, "-c", program],
                                                    {"role": "other", "fail": ["bo+m"], "timeout": "30s"})})

    def told(rec: Recorder) -> list[str]:
        return [n.text for n in rec.of(Notice) if "took over" in n.text]

    rec = await until_told(deployment, lambda r: bool(told(r)) and len(r.of(LogLines)) > 0, timeout=30)
    await asyncio.sleep(0.5)        # the later long lines: told once, not each time
    assert told(rec) == ["noisy: the config's pattern /bo+m/ took over 0 ms on one of its lines and matched nothing "
                         "there: write its repeats so that they cannot split a line in many ways"], told(rec)
    assert "failed" not in rec.states("noisy")
