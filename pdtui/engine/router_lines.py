"""A router's own lines about its workers: what it said when it asked one and did not take it.

Both routers (smg 1.x, sglang-router 0.3) take a worker through a workflow
whose lines name it by an instance id, not by its URL (``Step failed
instance_id=… step_id=discover_metadata error="Step timeout after 10s"
will_retry=true``), but where the error itself names the URL (``… health
check failed for explicitly configured worker URL http://…: …``). Their
health checkers name the URL (``HTTP health check returned non-success
status for http://…/health: 503 Service Unavailable``; smg: ``Health probe
failed worker_url=http://…``). So an instance is tied to a worker by any
line that names both, and the warnings of an instance tied to no worker are
found by the steps it failed (its last, ``Workflow failed … Workflow
deadlocked``, names none), for a caller that knows which steps ask what
failed (checks/refusal.py).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass

from pdtui.engine.checks.workers import url_address

KEPT = 64           # warnings kept of one invocation: a router retrying a worker repeats itself
QUOTED = 300        # characters of a line quoted: its beginning and its end, where a router's errors say why
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LEVEL = re.compile(r"\b(?:WARN|ERROR)\b")
_URL = re.compile(r"\b(?:https?|grpcs?)://(?:\[[0-9A-Fa-f:.]+\]|[\w.-]+)(?::\d+)?")
_INSTANCE = re.compile(r"\binstance_id=([^\s,]+)\s*")
_STEP = re.compile(r"\bstep_id=([^\s,]+)")
_WHERE = re.compile(r"^.*?\.rs:\d+: ")     # the router's time, level, target and source line before its message


@dataclass(frozen=True, slots=True)
class Said:
    """One warning of the router: its message (without its time, target and instance id), the workers it names
    (each as host and port), and its workflow instance."""

    text: str
    workers: frozenset[tuple[str, int | None]]
    instance: str | None


def _workers(text: str) -> frozenset[tuple[str, int | None]]:
    return frozenset(address for url in _URL.findall(text) if (address := url_address(url)) is not None)


class WorkerLines:
    """The warnings a router logged in its current invocation, and which workflow instance is which worker's."""

    def __init__(self) -> None:
        self._said: deque[Said] = deque(maxlen=KEPT)
        self._instances: dict[str, frozenset[tuple[str, int | None]]] = {}   # the workers each instance names
        self._failed: dict[str, frozenset[str]] = {}     # the steps each instance failed
        self._invocation: str | None = None

    def feed(self, message: str, invocation: str | None = None) -> None:
        """One line of the router (coloured as its journal holds it); a new invocation forgets the last one's."""
        if invocation != self._invocation:
            self._invocation = invocation
            self._said.clear()
            self._instances.clear()
            self._failed.clear()
        if "://" not in message and "instance_id" not in message:
            return          # the common case: a request's span, a start-up line (colours may split "instance_id=")
        text = _ANSI.sub("", message)
        instance = _INSTANCE.search(text)
        workers = _workers(text)
        if instance and workers:
            self._instances[instance[1]] = self._instances.get(instance[1], frozenset()) | workers
        if _LEVEL.search(text[:48]):
            step = _STEP.search(text)
            if instance and step:
                self._failed[instance[1]] = self._failed.get(instance[1], frozenset()) | {step[1]}
            quoted = _INSTANCE.sub("", _WHERE.sub("", text, count=1))
            self._said.append(Said(quoted, workers, instance[1] if instance else None))

    def about(self, url: str, steps: Collection[str] = ()) -> str | None:
        """The latest warning the router logged about the worker at ``url``: one that names it, or one of a
        workflow instance tied to it; else one of an instance tied to no worker that failed a step in ``steps``
        (the caller found that the worker fails what those steps ask). Cut in its middle to :data:`QUOTED`
        characters."""
        worker = url_address(url)
        if worker is None:
            return None
        tied = {instance for instance, workers in self._instances.items() if worker in workers}
        said = next((s for s in reversed(self._said) if worker in s.workers or s.instance in tied), None)
        if said is None and steps:
            said = next((s for s in reversed(self._said) if s.instance is not None and not s.workers
                         and s.instance not in self._instances and self._failed.get(s.instance, frozenset()) & {*steps}),
                        None)
        if said is None:
            return None
        text = said.text
        return text if len(text) <= QUOTED else f"{text[:QUOTED // 3]}…{text[len(text) - QUOTED + QUOTED // 3 + 1:]}"
