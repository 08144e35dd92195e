"""Hostile log lines through the engine and the headless faces: inert output, every line once, bounded memory.

A worker-like unit prints terminal escapes (CSI, OSC 52 clipboard writes, window
titles), Rich markup, invalid UTF-8 (journald turns it into a byte array), NUL,
C1 controls, bidi overrides, a 1 MiB line and a 100,000-line burst, then its
ready line. The TUI side of this is tested in test_ui_app.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import sys
import textwrap
import tracemalloc

import pytest
import yaml

from pdtui.engine.events import LogLines
from pdtui.engine.orchestrator import Orchestrator
from pdtui.faces.headless import JsonPrinter, LinePrinter
from pdtui.hosts import make_host
from pdtui.sim.sandbox import Sandbox
from pdtui.targets.registry import Registry
from pdtui.targets.systemd.host_session import HostSession
from pdtui.targets.systemd.journal_tail import JournalTail
from pdtui.targets.systemd.shared_commands import Started, UnitStarter
from tests.engine_helpers import FAST, sim_deployment

BURST = 100_000
BIG = 1 << 20
HOSTILE = [
    b"\x1b[31mred\x1b[0m colour",
    b"\x1b]52;c;cm0gLXJmIH4K\x07 clipboard write",
    b"\x1b]0;owned title\x1b\\ window title",
    b"\x1b[2J\x1b[H clear screen",
    b"[bold red]markup[/] [link=https://evil.example]click[/link]",
    b"bad \xff\xfe utf8 \xc3(",
    b"nul\x00inside",
    "c1 \u009b31m csi and \u202e reversed".encode(),
    b"bell\x07 and backspace\x08",
]
# Bytes that act on a terminal when printed raw: ESC, BEL, NUL, BS, and (UTF-8) C1 CSI / OSC, bidi override.
ACTIVE = ["\x1b", "\x07", "\x00", "\x08", "\x9b", "\x9d", "\u202e"]
ACTIVE_FOUND = re.compile("[" + "".join(ACTIVE) + "]")

PROGRAM = textwrap.dedent("""
    import sys, time
    out = sys.stdout.buffer
    for line in {hostile!r}:
        out.write(line + b"\\n")
    out.write(b"A" * {big} + b"\\n")
    out.write(b"".join(b"burst %d\\n" % i for i in range({burst})))
    out.write(b"HOSTILE-END\\n")
    out.flush()
    time.sleep(120)
""")


def hostile_argv(sandbox: Sandbox, burst: int = BURST, big: int = BIG) -> list[str]:
    """The unit's argv (the program goes to a file: a unit's ExecStart is one line)."""
    path = sandbox.root / "hostile.py"
    path.write_text(PROGRAM.format(hostile=HOSTILE, big=big, burst=burst))
    return [sys.executable, str(path)]


SERVICE = {"role": "other", "ready": {"log": "HOSTILE-END"}, "timeout": "600s"}   # a loaded CI machine is slow




class Sink(io.TextIOBase):
    """Stands in for stdout: checks every write is inert, keeps only what the test looks at (a whole write is
    searched first: a burst's batch is hundreds of lines, which the engine waits on while this looks)."""

    def __init__(self, keep: tuple[str, ...]) -> None:
        self.keep = re.compile("|".join(map(re.escape, keep)))
        self.kept: list[str] = []
        self.active: list[str] = []
        self.written = 0

    def write(self, text: str) -> int:
        self.written += len(text)
        if ACTIVE_FOUND.search(text):
            self.active += [line[:200] for line in text.splitlines() if ACTIVE_FOUND.search(line)]
        if self.keep.search(text):
            self.kept += [line for line in text.splitlines() if self.keep.search(line)]
        return len(text)


class Heartbeat:
    """Ticks on the event loop; the longest gap between ticks is how long the engine held the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, every: float = 0.01) -> None:
        self.loop, self.every = loop, every
        self.longest = 0.0
        self.ticks = 0
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        last = self.loop.time()
        while True:
            await asyncio.sleep(self.every)
            now = self.loop.time()
            self.longest = max(self.longest, now - last - self.every)
            self.ticks += 1
            last = now

    def stop(self) -> None:
        self._task.cancel()


async def until_journaled(sandbox: Sandbox, unit: str, last: str) -> None:
    """Until ``last`` is the newest line of ``unit`` in the sandbox's journal."""
    argv = [*sandbox.commands["journalctl"], "--output=cat", "--lines=1", "--quiet", f"--unit={unit}"]
    while True:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out, _ = await proc.communicate()
        if out.decode(errors="replace").strip() == last:
            return
        await asyncio.sleep(0.05)


def burst_before_anything_is_read(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worst order, every time: the host's tail has found its place (as it does during the preflight, which
    it begins before), the unit starts, and its whole burst is in the journal before the run reads anything.

    A run that then read the invocation's whole history held the burst twice, the read beside the tail's
    buffer (247 MiB); left to chance, the burst landed before the read now and then (a peak of 14 or 200+ MiB).
    """
    tails: list[JournalTail] = []
    follow, start = HostSession.follow, UnitStarter.start

    def follow_noted(session: HostSession, *args, **kwargs):
        following = follow(session, *args, **kwargs)
        assert session.tail is not None
        tails.append(session.tail)
        return following

    async def start_then_burst(starter: UnitStarter, unit: str, deadline: float | None = None) -> Started:
        while not tails or tails[0].since is None:
            await asyncio.sleep(0.01)
        result = await start(starter, unit, deadline)
        await until_journaled(sandbox, unit, "HOSTILE-END")
        return result

    monkeypatch.setattr(HostSession, "follow", follow_noted)
    monkeypatch.setattr(UnitStarter, "start", start_then_burst)


async def test_hostile_burst_through_engine_and_headless_printers_stays_inert_and_bounded(sandbox, monkeypatch):
    deployment = sim_deployment(sandbox, {"noisy": (hostile_argv(sandbox), SERVICE)})
    keep = ("markup", "clipboard", "title", "utf8", "AAAA", "inside", "c1 ", "bell", "colour", "clear")
    human, machine = Sink(keep), Sink(keep)
    counted = {"lines": 0, "batches": 0, "burst": 0}

    def count(event) -> None:
        if isinstance(event, LogLines):
            counted["lines"] += len(event.lines)
            counted["batches"] += 1
            counted["burst"] += sum(r.text.startswith("burst ") for r in event.lines)

    burst_before_anything_is_read(sandbox, monkeypatch)
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
    for subscriber in (LinePrinter(human, logs=True), JsonPrinter(machine, logs=True), count):
        orchestrator.subscribe(subscriber)
    heartbeat = Heartbeat(asyncio.get_running_loop())
    tracemalloc.start()
    try:
        done = await orchestrator.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        heartbeat.stop()
        await orchestrator.close()
    print(f"\nhostile burst: {counted['lines']} lines in {counted['batches']} batches, "
          f"peak traced memory {peak / 2**20:.1f} MiB, longest event-loop stall {heartbeat.longest * 1000:.0f} ms")
    assert done.ok, done
    assert counted["lines"] >= len(HOSTILE) + 1 + BURST + 1
    assert counted["burst"] == BURST     # each line of the burst once: none lost, none read twice
    assert human.active == [] and machine.active == []
    human_text = "\n".join(human.kept)
    assert "[bold red]markup[/] [link=https://evil.example]click[/link]" in human_text
    assert "␛]52;c;cm0gLXJmIH4K␇ clipboard write" in human_text
    assert "bad \ufffd\ufffd utf8 \ufffd(" in human_text
    assert "nul␀inside" in human_text and "\\x9b31m" in human_text and "\\u202e" in human_text
    big = next(line for line in human.kept if "AAAA" in line)
    assert len(big) < 5000 and big.endswith(f"({BIG - 4096} more)")
    # The JSON face carries the exact text, escaped: a consumer gets every byte back, the terminal none.
    records = [r for line in machine.kept for r in json.loads(line).get("lines", [])]
    texts = {r["text"] for r in records}
    assert "\x1b]52;c;cm0gLXJmIH4K\x07 clipboard write" in texts and "nul\x00inside" in texts
    assert "A" * BIG in texts
    # The burst held once (by the tail's buffer) peaks near 50 MiB; held twice (a whole history read beside it), 247.
    assert peak < 100 * 2**20, f"peak traced memory {peak / 2**20:.0f} MiB"


def _config(sandbox: Sandbox, path) -> None:
    unit = sandbox.add_unit("t-noisy", hostile_argv(sandbox, burst=1000))
    config = {"name": "hostile", "hosts": {"sim": {"local": True, "commands": sandbox.commands}},
              "services": {"noisy": {"host": "sim", "unit": unit, **SERVICE}}}
    path.write_text(yaml.safe_dump(config))


@pytest.mark.parametrize("face", [["--headless", "--logs"], ["--json", "--logs"]], ids=["lines", "json"])
def test_headless_stdout_of_pdtui_up_carries_no_terminal_control_bytes(sandbox, tmp_path, face):
    config = tmp_path / "hostile.yaml"
    _config(sandbox, config)
    result = subprocess.run([sys.executable, "-m", "pdtui", "up", str(config), *face], capture_output=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    out = result.stdout.decode("utf-8")     # valid UTF-8 even though the log was not
    assert "HOSTILE-END" in out
    active = [c for c in ACTIVE if c in out]
    assert active == [], active
    assert b"Traceback" not in result.stderr
