"""A host's GPUs while the deployment runs: one long-running ``nvidia-smi -lms`` per host, as GpuSample events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pdtui.gpus.inventory import GpuInfo, Inventory
from pdtui.gpus.nvidia_smi import SAMPLE_FIELDS, parse_gpu_line
from pdtui.hosts.base import Host, HostError
from pdtui.support.backoff import Backoff

ROUND_PAUSE = 0.5        # a sampler round ends when no line came for this long (rounds are 2 s apart)
RESTART_DELAY = 5.0      # after the nvidia-smi stream ended, wait this long before starting another
MAX_RESTART_DELAY = 60.0


@dataclass(frozen=True, slots=True)
class GpuSample:
    """A host's GPUs at one moment: one of the engine's events (engine/events.py's ``Event``), made here by the
    sampler that reads them, so this package imports no engine."""

    host: str
    gpus: tuple[GpuInfo, ...]
    elapsed: float = 0.0


class GpuSampler:
    """One long-running ``nvidia-smi --query-gpu=... -lms N`` on a host, as GpuSample events.

    nvidia-smi prints one line per GPU each round and then sleeps: a round
    ends when an index comes again or when no line came for ``pause`` seconds.
    ``clock`` gives the ``elapsed`` stamped on each sample (the orchestrator's
    ``elapsed``). Cancelling :meth:`run` stops the process; if the stream ends
    by itself (driver trouble, a dropped connection) another is started after
    a delay that grows while no sample comes.
    """

    def __init__(self, host: Host, host_name: str, argv: Sequence[str], on_sample: Callable[[GpuSample], None],
                 clock: Callable[[], float], *, inventory: Inventory | None = None, pause: float = ROUND_PAUSE,
                 restart_delay: float = RESTART_DELAY) -> None:
        self.host = host
        self.host_name = host_name
        self.argv = list(argv)
        self.on_sample = on_sample
        self.clock = clock
        self.inventory = inventory or Inventory(host_name, ())
        self.pause = pause
        self.restart_delay = restart_delay
        self._round: dict[int, GpuInfo] = {}
        self._timer: asyncio.TimerHandle | None = None
        self.samples = 0          # samples emitted so far

    async def run(self) -> None:
        backoff = Backoff(self.restart_delay, MAX_RESTART_DELAY)
        while True:
            before = self.samples
            await self._stream_once()
            if self.samples > before:
                backoff.reset()
            await asyncio.sleep(backoff.next())

    async def _stream_once(self) -> None:
        """Follow one nvidia-smi process until it ends."""
        try:
            async with self.host.stream(self.argv) as lines:
                async for batch in lines.batches():
                    self._add_all(batch)
        except HostError:
            pass
        finally:
            self._cancel_timer()
        self._flush()

    def _add_all(self, batch: list[bytes]) -> None:
        """Add the lines that came together to the round (a repeated index closes the previous round first);
        the round ends ``pause`` after the last of them unless a line comes sooner. A round's lines come
        together: one timer per read, not per line (128 hosts' rounds come in the same moment)."""
        added = False
        for raw in batch:
            gpu = parse_gpu_line(raw.decode(errors="replace"), SAMPLE_FIELDS)
            if gpu is None:
                continue
            if gpu.index in self._round:
                self._flush()
            self._round[gpu.index] = self.inventory.info(gpu)
            added = True
        if added:
            self._cancel_timer()
            self._timer = asyncio.get_running_loop().call_later(self.pause, self._flush)

    def _flush(self) -> None:
        self._cancel_timer()
        if not self._round:
            return
        gpus = tuple(sorted(self._round.values(), key=lambda info: info.index))
        self._round = {}
        self.samples += 1
        self.on_sample(GpuSample(self.host_name, gpus, self.clock()))

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
