"""Faults during bring-up, on the simulated deployment (local host): pdtui stays calm and tells the truth.

Each test plays one fault and checks the outcome a user sees: the state each
service ends in, the reason given, and that nothing waits forever or starts the
router on a lie. See docs/reliability.md for the table these tests back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from pdtui.config import parse_config
from pdtui.engine.events import Done, LogLines, Notice, ProbeResult, StepChanged
from pdtui.engine.orchestrator import Orchestrator
from pdtui.hosts import make_host
from pdtui.hosts.local import LocalHost
from pdtui.sim.journal import Journal, unit_entry
from pdtui.sim.ports import free_port
from pdtui.sim.sandbox import Sandbox
from pdtui.targets.registry import Registry
from pdtui.targets.systemd.commands import Commands
from pdtui.targets.systemd.journal_tail import JournalTail
from tests.engine_helpers import FAST, Recorder, bring_up, reference, sim_deployment, worker_argv

PY = sys.executable
SUDO_MESSAGE = "sudo: a password is required"




def program(sandbox: Sandbox, name: str, code: str) -> list[str]:
    """A unit's argv running a Python program written to a file (free to quote as it likes)."""
    path = sandbox.root / f"{name}.py"
    path.write_text(textwrap.dedent(code))
    return [PY, str(path)]


def script(code: str) -> list[str]:
    """A unit's argv running a short Python program."""
    return [PY, "-c", textwrap.dedent(code)]


def backends(boot: int, prefill_fail: str | None = None, decode_fail: str | None = None,
             timeout: str = "20s") -> dict:
    p, d = free_port(), free_port()
    return {
        "prefill": (worker_argv("prefill", p, bootstrap=boot, fail=prefill_fail),
                    {"role": "prefill", "port": p, "timeout": timeout}),
        "decode": (worker_argv("decode", d, bootstrap=boot, fail=decode_fail),
                   {"role": "decode", "port": d, "timeout": timeout}),
    }


# --- units that fail ----------------------------------------------------------------------------

async def test_backend_unit_that_exits_while_waiting_fails_at_once_and_blocks_the_router(sandbox):
    # No failure line at all: only the unit's exit tells. It must not wait for the timeout.
    services = backends(free_port())
    services["decode"] = (script("print('loading', flush=True); import time; time.sleep(0.3); raise SystemExit(3)"),
                          {"role": "decode", "port": free_port(), "timeout": "5m"})
    services["router"] = (script("import time; time.sleep(60)"), {"role": "router", "port": free_port()})
    done, rec, _ = await bring_up(sim_deployment(sandbox, services))
    assert rec.states("decode") == ["starting", "waiting", "failed"]
    assert done.failures["decode"] == "unit t-decode.service failed (exit status 3)"
    assert rec.states("router") == ["blocked"]


async def test_a_traceback_alone_is_quoted_when_the_unit_then_dies(sandbox):
    # A traceback fails nothing by itself; the unit's end does, named with the exception the traceback ended in.
    services = backends(free_port())
    services["decode"] = (program(sandbox, "traceback", """
        import sys, time
        print("Traceback (most recent call last):", flush=True)
        print('  File "x.py", line 1, in <module>', flush=True)
        print("RuntimeError: a cause no signature knows", flush=True)
        time.sleep(0.5)
        raise SystemExit(1)
    """), {"role": "decode", "port": free_port(), "timeout": "5m"})
    done, rec, _ = await bring_up(sim_deployment(sandbox, services))
    failed = rec.change("decode", "failed")
    assert failed.reason == "unit t-decode.service failed (exit status 1): RuntimeError: a cause no signature knows"
    assert failed.line == "RuntimeError: a cause no signature knows"


HEALTH_GOES_BAD = """
    import http.server, os, threading, time
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503 if os.path.exists("FLAG") else 200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ERROR:    Exception in ASGI application", flush=True)
    print("Traceback (most recent call last):", flush=True)
    print("KeyError: 'messages'", flush=True)
    print("The server is fired up and ready to roll!", flush=True)
    while True:
        time.sleep(60)
"""


async def _ready_then_unhealthy(sandbox, unhealthy_after: str, watch_poll: float):
    """A ready decode whose /health turns 503 once the test says so (a flag file): the recorder and orchestrator."""
    port, flag = free_port(), sandbox.root / "unhealthy"
    code = HEALTH_GOES_BAD.replace("PORT", str(port)).replace('"FLAG"', repr(str(flag)))
    services = {"decode": (program(sandbox, "health", code),
                           {"role": "decode", "port": port, "unhealthy_after": unhealthy_after})}
    recorder = Recorder()
    orchestrator = Orchestrator(sim_deployment(sandbox, services), Registry(make_host),
                                timing=dataclasses.replace(FAST, watch_poll=watch_poll))
    orchestrator.subscribe(recorder)
    assert (await orchestrator.run()).ok
    flag.touch()
    return recorder, orchestrator


async def test_health_failing_in_a_row_over_the_window_fails_a_ready_service(sandbox):
    recorder, orchestrator = await _ready_then_unhealthy(sandbox, "0.5s", 0.2)
    try:
        await asyncio.wait_for(_until_state(recorder, "decode", "failed"), 20)
    finally:
        await orchestrator.close()
    failed = recorder.change("decode", "failed")
    assert failed.reason.startswith("after ready: http /ready failing for ")
    assert "checks in a row): HTTP 503" in failed.reason
    assert failed.line == "KeyError: 'messages'"     # the request's traceback, quoted as evidence


async def test_failed_health_checks_within_the_window_fail_nothing(sandbox):
    recorder, orchestrator = await _ready_then_unhealthy(sandbox, "1h", 0.1)
    try:
        await asyncio.wait_for(_until_check(recorder, "decode", "http /ready", ok=False), 20)
        await asyncio.sleep(1.0)   # several failed checks in a row, all within the window
    finally:
        await orchestrator.close()
    assert recorder.states("decode")[-1] == "ready"


async def _until_state(recorder: Recorder, service: str, state: str) -> None:
    while state not in recorder.states(service):
        await asyncio.sleep(0.05)


async def _until_check(recorder: Recorder, service: str, check: str, *, ok: bool) -> None:
    while not any(isinstance(e, ProbeResult) and e.service == service and e.check == check and e.ok is ok
                  for e in recorder.events):
        await asyncio.sleep(0.05)


async def test_router_unit_that_cannot_exec_fails_naming_203_exec_and_quoting_systemd(sandbox):
    services = backends(free_port())
    port = free_port()
    services["router"] = (["/nonexistent/sglang-router", "--port", str(port)], {"role": "router", "port": port})
    done, rec, _ = await bring_up(sim_deployment(sandbox, services))
    assert rec.states("prefill")[-1] == rec.states("decode")[-1] == "ready"
    assert rec.states("router") == ["starting", "waiting", "failed"]
    assert done.failures["router"] == (
        "unit t-router.service failed (exit status 203/EXEC: systemd could not run its ExecStart: a wrong path, "
        "often a venv's python): Failed to locate executable /nonexistent/sglang-router: No such file or directory")
    system = [r.text for e in rec.of(LogLines) if e.service == "router" for r in e.lines]
    assert any("status=203/EXEC" in line for line in system)


async def test_router_whose_port_never_listens_times_out_naming_the_port_check(sandbox):
    services = backends(free_port())
    port = free_port()
    services["router"] = (script("import time; print('starting', flush=True); time.sleep(60)"),
                          {"role": "router", "port": port, "timeout": "2s"})
    done, rec, _ = await bring_up(sim_deployment(sandbox, services))
    assert rec.states("router") == ["starting", "waiting", "timed_out"]
    reason = done.failures["router"]
    assert reason.startswith(f"not ready after 2s: waiting for tcp (port {port} not accepting"), reason


async def test_backend_killed_after_ready_fails_and_the_router_is_said_degraded(sandbox):
    recorder = Recorder()
    orchestrator = Orchestrator(reference(sandbox), Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    try:
        first = await orchestrator.run()
        assert first.ok, first
        steps = recorder.of(StepChanged)
        child = sandbox.store.read_state("sglang-dsv4-decode").child_proc()
        os.kill(child.pid, signal.SIGKILL)
        async with asyncio.timeout(20):
            while len(recorder.of(Done)) < 2:
                await asyncio.sleep(0.05)
    finally:
        await orchestrator.close()
    assert recorder.states("decode")[-2:] == ["ready", "failed"]
    # As under systemd: its unit's Restart=on-failure holds it in activating (auto-restart) for RestartSec=10.
    reason = recorder.change("decode", "failed").reason
    assert reason.startswith("after ready: unit sglang-dsv4-decode.service ended (killed by signal 9/KILL); systemd "
                             "restarts it"), reason
    degraded = [n for n in recorder.of(Notice) if n.service == "router"]
    assert degraded and degraded[0].level == "warning", recorder.of(Notice)
    assert "degraded" in degraded[0].text and "decode" in degraded[0].text
    again = recorder.of(Done)[-1]
    assert not again.ok and "decode" in again.failures
    assert recorder.of(StepChanged) == steps, "the bring-up's steps stay as they went"
    failed_at = recorder.change("decode", "failed").elapsed
    assert again.ready_at == first.ready_at and again.failed_at is not None
    assert first.ready_at is not None and first.ready_at <= failed_at <= again.failed_at <= again.elapsed


# --- the host's tools ----------------------------------------------------------------------------

NO_JOURNALCTL = {
    "not-on-this-host": ["/nonexistent/bin/journalctl"],
    # What a remote shell answers (over SSH the command runs under sh).
    "shell-says-not-found": ["sh", "-c", "echo 'sh: 1: exec: journalctl: not found' >&2; exit 127", "journalctl"],
}


@pytest.mark.parametrize("journalctl", NO_JOURNALCTL.values(), ids=NO_JOURNALCTL.keys())
async def test_missing_journalctl_fails_the_bring_up_clearly_instead_of_waiting(sandbox, journalctl):
    deployment = sim_deployment(sandbox, backends(free_port(), timeout="5m"),
                                hosts={"sim": {"local": True, "commands": {
                                    "systemctl": sandbox.commands["systemctl"], "journalctl": journalctl}}})
    done, rec, _ = await bring_up(deployment)
    assert not done.ok and done.failures
    for service, reason in done.failures.items():
        assert "journalctl" in reason and "\n" not in reason, reason
        assert "not found" in reason or "No such file" in reason
        assert rec.states(service)[-1] in ("failed", "blocked")
    tail_notices = [n.text for n in rec.of(Notice) if "journalctl" in n.text]
    assert tail_notices and len(tail_notices) == len(set(tail_notices)), "a problem is told once, not at every retry"


async def test_sudo_asking_for_a_password_is_one_clear_error(sandbox, tmp_path, monkeypatch):
    bin_dir = tmp_path / "fake-sudo"
    bin_dir.mkdir()
    sudo = bin_dir / "sudo"
    sudo.write_text(f"#!/bin/sh\necho '{SUDO_MESSAGE}' >&2\nexit 1\n")
    sudo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    deployment = sim_deployment(sandbox, backends(free_port()),
                                hosts={"sim": {"local": True, "sudo": True, "commands": sandbox.commands}})
    done, rec, _ = await bring_up(deployment)
    assert not done.ok
    reasons = set(done.failures.values())
    assert len(reasons) == 1, reasons
    reason = reasons.pop()
    assert "passwordless sudo" in reason and "\n" not in reason
    assert not any(s in rec.states("prefill") for s in ("starting", "waiting")), "nothing was started"


# --- the journal ----------------------------------------------------------------------------------

async def _tail_lines(sandbox: Sandbox, upset) -> list[str]:
    """Follow UNIT, log 20 lines, ``upset(journal)``, log 20 more; the messages the tail delivered."""
    journal = Journal(sandbox.root)
    got: list[str] = []
    enough = {20: asyncio.Event(), 40: asyncio.Event()}

    following = asyncio.Event()

    def on_entry(entry) -> None:
        if entry.message == "ping":
            following.set()
            return
        got.append(entry.message)
        if len(got) in enough:
            enough[len(got)].set()

    def log(tag: str) -> None:
        journal.append([unit_entry("u.service", "inv", 7, "w", f"{tag} {i}".encode(), 6) for i in range(20)])

    tail = JournalTail(LocalHost("sim"), Commands.for_host(_HostCommands(sandbox)), ["u.service"], on_entry)
    follow = asyncio.create_task(tail.run())
    try:
        async with asyncio.timeout(10):
            while not following.is_set():    # until journalctl follows (it shows only what comes after)
                journal.append([unit_entry("u.service", "inv", 7, "w", b"ping", 6)])
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(following.wait(), 0.05)
        log("before")
        await asyncio.wait_for(enough[20].wait(), 10)
        upset(journal)
        log("after")
        await asyncio.wait_for(enough[40].wait(), 10)
    finally:
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
        journal.close()
    return got


class _HostCommands:
    def __init__(self, sandbox: Sandbox) -> None:
        self.commands = sandbox.commands
        self.sudo = False


@pytest.mark.parametrize("remove", [False, True], ids=["rotated", "vacuumed"])
async def test_tail_follows_on_when_the_journal_is_rotated_or_vacuumed_under_it(each_journal, remove):
    got = await _tail_lines(each_journal, lambda journal: each_journal.rotate_journal(remove=remove))
    assert got == [f"before {i}" for i in range(20)] + [f"after {i}" for i in range(20)]


async def test_stand_in_follows_on_when_its_file_is_cut_short_under_it(tmp_path):
    with Sandbox.create(tmp_path / "sim", real_journal=False) as sandbox:
        got = await _tail_lines(sandbox, lambda journal: os.truncate(journal.path, 0))
    assert got == [f"before {i}" for i in range(20)] + [f"after {i}" for i in range(20)]


# --- clocks ---------------------------------------------------------------------------------------

# A host whose clock is off: its journalctl, with every __REALTIME_TIMESTAMP moved by argv[1] seconds.
SKEWED_JOURNALCTL = textwrap.dedent("""
    import json, subprocess, sys
    shift = int(float(sys.argv[1]) * 1e6)
    proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE)
    for line in proc.stdout:
        entry = json.loads(line)
        entry["__REALTIME_TIMESTAMP"] = str(int(entry["__REALTIME_TIMESTAMP"]) + shift)
        sys.stdout.buffer.write(json.dumps(entry, ensure_ascii=False).encode() + b"\\n")
        sys.stdout.flush()
    sys.exit(proc.wait())
""")


@pytest.mark.parametrize("minutes", [-17, 23])
async def test_readiness_does_not_depend_on_the_host_clock(sandbox, minutes):
    reference(sandbox)
    config = yaml.safe_load((sandbox.root / "demo.yaml").read_text())
    commands = config["hosts"]["gpu0"]["commands"]
    commands["journalctl"] = [PY, "-c", SKEWED_JOURNALCTL, str(minutes * 60), *commands["journalctl"]]
    done, rec, _ = await bring_up(parse_config(yaml.safe_dump(config), "skewed.yaml"))
    assert done.ok, done
    offsets = [r.timestamp - time.time() for e in rec.of(LogLines) for r in e.lines if r.timestamp]
    assert offsets and all(abs(o - minutes * 60) < 60 for o in offsets), "the journal really was skewed"


def test_skewed_journalctl_shifts_only_the_timestamp():
    line = json.dumps({"__REALTIME_TIMESTAMP": "1000000000", "MESSAGE": "x"})
    out = subprocess.run([PY, "-c", SKEWED_JOURNALCTL, "60", PY, "-c", f"print({line!r})"], capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == {"__REALTIME_TIMESTAMP": "1060000000", "MESSAGE": "x"}


def _last_cursor(sandbox: Sandbox, unit: str) -> str:
    out = subprocess.run([*sandbox.commands["journalctl"], "-o", "json", "-u", unit], capture_output=True,
                         check=True, timeout=30).stdout
    return json.loads(out.splitlines()[-1])["__CURSOR"]


async def _resume(sandbox: Sandbox, cursor: str, until) -> tuple[list[str], list[str]]:
    """A tail resumed from ``cursor``, until ``await until(got)``; what it delivered and the problems it told."""
    got: list[str] = []
    problems: list[str] = []

    def on_entry(entry) -> None:
        got.append(entry.message)

    tail = JournalTail(LocalHost("sim"), Commands.for_host(_HostCommands(sandbox)), ["u.service"], on_entry,
                       problems.append)
    tail.cursor = cursor
    follow = asyncio.create_task(tail.run())
    try:
        async with asyncio.timeout(10):
            await tail.started.wait()
            await until(got)
    finally:
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
    return got, problems


async def test_tail_whose_place_was_vacuumed_away_resumes_at_the_nearest_entry_and_loses_none(each_journal):
    journal = Journal(each_journal.root)
    try:
        journal.append([unit_entry("u.service", "inv", 7, "w", f"old {i}".encode(), 6) for i in range(5)])
        place = _last_cursor(each_journal, "u.service")     # where a tail had read up to
        each_journal.rotate_journal(remove=True)
        journal.append([unit_entry("u.service", "inv", 7, "w", f"new {i}".encode(), 6) for i in range(3)])

        async def three(got: list[str]) -> None:
            while len(got) < 3:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)      # and nothing more comes

        got, problems = await _resume(each_journal, place, three)
    finally:
        journal.close()
    assert got == ["new 0", "new 1", "new 2"] and not problems


async def test_tail_given_a_cursor_journalctl_cannot_parse_follows_from_now_and_says_so(each_journal):
    journal = Journal(each_journal.root)
    journal.append([unit_entry("u.service", "inv", 7, "w", b"old", 6)])

    async def log_until_delivered(got: list[str]) -> None:
        while not got:                    # log until the new journalctl has surely started
            journal.append([unit_entry("u.service", "inv", 7, "w", b"new", 6)])
            await asyncio.sleep(0.1)

    try:
        got, problems = await _resume(each_journal, "s=gone;i=2a", log_until_delivered)
    finally:
        journal.close()
    assert got and set(got) == {"new"}
    assert any("lost our place" in p for p in problems), problems
