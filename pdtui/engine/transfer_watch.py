"""A serving backend's KV transfer queues, followed for requests that stay there while no transfer completes.

A PD pair whose KV stops moving goes silent: its server logs nothing, its
health stays 200, and the engine fails the requests only at its own timeout,
minutes later (SGLang's ``KVTransferError ... timed out in KVPoll.Bootstrapping``
or ``WaitingForInput``, after 300 or 600 s). Its queues tell it long before:
requests held in one of them while the server's count of what moved on does
not rise are the same requests, waiting. Past ``Timing.transfer_stall`` of
that, pdtui warns once, naming the side and the queue in its engine's words,
and says when they move again. The queues come from the server's ``/metrics``
(its serving engine reads them); a server without them is not followed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdtui.config.fields import took
from pdtui.engine.events import Notice
from pdtui.vocabulary.figures import TransferQueues, TransferStage

if TYPE_CHECKING:
    from pdtui.engine.service_run import ServiceRun

FOLLOWED_ROLES = ("prefill", "decode")


class TransferWatch:
    """One backend's transfer queues in one start of it: since when each has held requests with nothing moving on,
    and which were warned of."""

    def __init__(self, run: ServiceRun) -> None:
        self.run = run
        self._moved: float | None = None       # the server's count of what moved on, at the last look
        self._since: dict[str, float] = {}     # by queue: when it was first seen holding requests, nothing moving
        self._warned: set[str] = set()

    @property
    def applies(self) -> bool:
        """Whether this run's queues are followed: a prefill or decode with its own figures (not a rank >= 1)."""
        cfg = self.run.cfg
        return cfg.role in FOLLOWED_ROLES and not cfg.follower and self.run.metrics.available

    def begin(self) -> None:
        """A new start of the server: its counts start again."""
        self._moved, self._since, self._warned = None, {}, set()

    async def look(self) -> None:
        """Read its queues once; warn of a queue stalled past the threshold, tell one that moves again."""
        run = self.run
        queues = await run.metrics.read(run.serving.transfer_queues, fresh=run.w.timing.figures_poll)
        if queues is not None:
            self.judge(queues, run.w.clock())

    def judge(self, queues: TransferQueues, now: float) -> None:
        moving = self._moved is not None and queues.moved > self._moved
        self._moved = queues.moved
        for stage in queues.stages:
            if stage.requests and not moving:
                since = self._since.setdefault(stage.queue, now)
                if now - since >= self.run.w.timing.transfer_stall and stage.queue not in self._warned:
                    self._warned.add(stage.queue)
                    self._tell("warning", self._stalled(stage, now - since))
                continue
            since = self._since.pop(stage.queue, now)
            if stage.queue in self._warned:
                self._warned.discard(stage.queue)
                self._tell("info", f"{self.run.name}: KV transfers move again: its {stage.queue} no longer holds the "
                                   f"same requests, after {took(now - since)}")

    def _stalled(self, stage: TransferStage, seconds: float) -> str:
        run = self.run
        count = f"{stage.requests} request{'s' if stage.requests != 1 else ''}"
        return (f"{run.name}: {count} stuck in KV transfer for {took(seconds)}, none moving on: the "
                f"{run.cfg.role} side of its pairs, in its {stage.queue} ({stage.waits_for}); the engine fails them "
                f"only at its own transfer timeout, minutes from now")

    def _tell(self, level: str, text: str) -> None:
        w = self.run.w
        w.emit(Notice(level, text, self.run.name, w.elapsed()))
