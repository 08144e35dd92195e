"""The GPU sampler: one long-running nvidia-smi per host, one GpuSample per round, a clean stop."""

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

from pdtui.gpus.inventory import GpuInfo, inventory
from pdtui.gpus.nvidia_smi import sampler_argv
from pdtui.gpus.sampler import GpuSample, GpuSampler
from pdtui.hosts.base import HostError, each_line
from pdtui.hosts.local import LocalHost
from pdtui.sim.systemctl import ROOT_ENV

WAIT = 20.0




class Samples:
    """Collects samples; ``wait(n)`` returns once ``n`` have come."""

    def __init__(self) -> None:
        self.got: list[GpuSample] = []
        self._changed = asyncio.Event()

    def __call__(self, sample: GpuSample) -> None:
        self.got.append(sample)
        self._changed.set()

    async def wait(self, count: int) -> list[GpuSample]:
        async def until() -> None:
            while len(self.got) < count:
                self._changed.clear()
                await self._changed.wait()
        await asyncio.wait_for(until(), WAIT)
        return self.got


class CountingHost(LocalHost):
    """A LocalHost that counts the streams it starts."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.streams: list[list[str]] = []

    def stream(self, argv):
        self.streams.append(list(argv))
        return super().stream(argv)


def stand_ins(root: Path) -> list[int]:
    """PIDs of nvidia-smi stand-ins of this sandbox still running (given --root, or the wrapper's environment)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = str(root).encode() in cmdline or f"{ROOT_ENV}={root}".encode() in environ
        if b"pdtui.sim.nvidia_smi" in cmdline and ours:
            found.append(int(entry.name))
    return found


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_one_stream_gives_a_sample_per_round_and_stops_clean(sandbox):
    host = CountingHost("gpu0")
    inv = await inventory(host, sandbox.commands["nvidia-smi"])
    samples = Samples()
    sampler = GpuSampler(host, "gpu0", sampler_argv(sandbox.commands["nvidia-smi"], interval_ms=50), samples,
                         clock=lambda: 12.5, inventory=inv)
    task = asyncio.create_task(sampler.run())
    try:
        got = await samples.wait(3)
        assert len(stand_ins(sandbox.root)) == 1
    finally:
        await stop(task)
    assert len(host.streams) == 1 and host.streams[0][-2:] == ["-lms", "50"]
    assert all(s.host == "gpu0" and s.elapsed == 12.5 for s in got)
    assert got[0].gpus[0] == GpuInfo(0, "NVIDIA H100 80GB HBM3", 1, 81559, 0, 0)
    assert [(g.index, g.numa) for g in got[-1].gpus] == [(i, 0 if i < 4 else 1) for i in range(8)]
    assert stand_ins(sandbox.root) == []


class ScriptedHost:
    """Streams given lines; after them, either ends or stays open (like nvidia-smi between rounds)."""

    name = "box"

    def __init__(self, lines: list[str], *, then_hang: bool) -> None:
        self.lines, self.then_hang = lines, then_hang
        self.opened = 0
        self.closed = 0

    @asynccontextmanager
    async def stream(self, argv):
        self.opened += 1

        try:
            yield ScriptedLines(self.lines, self.then_hang)
        finally:
            self.closed += 1


class ScriptedLines:
    """A stream's lines (the Lines protocol), one read each."""

    def __init__(self, lines: list[str], then_hang: bool) -> None:
        self.lines, self.then_hang = lines, then_hang

    def __aiter__(self):
        return each_line(self.batches())

    async def batches(self):
        for line in self.lines:
            yield [line.encode()]
        if self.then_hang:
            await asyncio.Event().wait()


async def test_a_repeated_index_closes_a_round():
    lines = ["0, 10, 100, 1", "1, 20, 100, 2", "0, 11, 100, 3", "1, 21, 100, 4"]
    host, samples = ScriptedHost(lines, then_hang=True), Samples()
    task = asyncio.create_task(GpuSampler(host, "box", [], samples, clock=lambda: 0.0, pause=0.05).run())
    try:
        got = await samples.wait(2)
    finally:
        await stop(task)
    assert [[g.memory_used_mib for g in s.gpus] for s in got] == [[10, 20], [11, 21]]
    assert (host.opened, host.closed) == (1, 1)


async def test_na_values_and_junk_lines():
    lines = ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
             "0, [N/A], [N/A], [N/A]", "1, 5 MiB, 81559 MiB, 7 %"]
    host, samples = ScriptedHost(lines, then_hang=False), Samples()
    task = asyncio.create_task(GpuSampler(host, "box", [], samples, clock=lambda: 0.0, restart_delay=60).run())
    try:
        (sample,) = await samples.wait(1)
    finally:
        await stop(task)
    assert sample.gpus == (GpuInfo(0), GpuInfo(1, "", 5, 81559, 7))


async def test_an_ended_stream_is_started_again():
    host, samples = ScriptedHost(["0, 1, 2, 3"], then_hang=False), Samples()
    task = asyncio.create_task(GpuSampler(host, "box", [], samples, clock=lambda: 0.0, restart_delay=0.01).run())
    try:
        await samples.wait(2)
    finally:
        await stop(task)
    assert host.opened >= 2 and host.opened == host.closed


async def test_a_host_error_does_not_end_sampling():
    class Unreachable:
        name = "gone"
        tries = 0

        @asynccontextmanager
        async def stream(self, argv):
            self.tries += 1
            raise HostError("gone: no route to host")
            yield

    host = Unreachable()
    task = asyncio.create_task(GpuSampler(host, "gone", [], Samples(), clock=lambda: 0.0, restart_delay=0.001).run())
    try:
        while host.tries < 2 and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done(), "the sampler gave up on a host error"
    finally:
        await stop(task)
