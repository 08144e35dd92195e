"""A journal tail over real SSH survives a dropped connection: no line lost, none shown twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess

from pdtui.sim.journal import Journal, unit_entry
from pdtui.sim.sandbox import Sandbox
from pdtui.targets.systemd.commands import Commands
from pdtui.targets.systemd.journal_tail import JournalTail
from tests.sshd import trust

UNIT = "sglang-test.service"


async def test_tail_resumes_after_a_drop_with_every_line_exactly_once(sshd, ssh_home, make_host, forwarder, tmp_path):
    sandbox = Sandbox.create(tmp_path / "sim")
    journal = Journal(sandbox.root)

    def log(messages: list[str]) -> None:
        journal.append([unit_entry(UNIT, "inv-1", 4242, "worker", m.encode(), 6) for m in messages])

    log(["written before the tail"])
    relay = await forwarder(sshd.port)
    trust(ssh_home, sshd, relay.port)
    host = make_host(relay.port)
    got: list[str] = []
    enough = {50: asyncio.Event(), 100: asyncio.Event()}

    def on_entry(entry) -> None:
        got.append(entry.message)
        if len(got) in enough:
            enough[len(got)].set()

    tail = JournalTail(host, Commands(journalctl_prefix=(str(sandbox.bin_dir / "journalctl"),)), [UNIT], on_entry)
    # Follow from the first line on (no start-up race), with the cursor this journalctl gave for it.
    first = subprocess.run([*sandbox.commands["journalctl"], "-o", "json", "-n", "1", f"--unit={UNIT}"],
                           capture_output=True, check=True).stdout
    tail.cursor = json.loads(first)["__CURSOR"]
    follow = asyncio.create_task(tail.run())
    try:
        before = [f"before the drop {i}" for i in range(50)]
        log(before)
        await asyncio.wait_for(enough[50].wait(), 30)
        relay.cut()
        after = [f"after the drop {i}" for i in range(50)]
        log(after)
        await asyncio.wait_for(enough[100].wait(), 30)
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
        journal.close()
        sandbox.cleanup()
    assert got == before + after
    assert relay.accepted == 2
