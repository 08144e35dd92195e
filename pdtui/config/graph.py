"""The deployment's dependency graph: which service waits for which (``after``), as plain algorithms.

Each function takes the ``after`` lists by service name, in config order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

After = Mapping[str, Sequence[str]]


def find_cycle(after: After) -> tuple[str, int, list[str]] | None:
    """The first cycle a depth-first search in config order meets: (service, index in its after, the cycle)."""
    done: set[str] = set()
    stack: list[str] = []

    def visit(name: str) -> tuple[str, int, list[str]] | None:
        stack.append(name)
        for index, dep in enumerate(after[name]):
            if dep in stack:
                return name, index, stack[stack.index(dep):] + [dep]
            if dep not in done and (found := visit(dep)):
                return found
        stack.pop()
        done.add(name)
        return None

    for name in after:
        if name not in done and (found := visit(name)):
            return found
    return None


def levels(after: After) -> list[list[str]]:
    """Services grouped by how many ``after`` hops precede them: level 0 starts first, each later level
    once the ones before it are ready. Config order within."""
    depth: dict[str, int] = {}

    def level_of(name: str) -> int:
        if name not in depth:
            depth[name] = 1 + max((level_of(dep) for dep in after[name]), default=-1)
        return depth[name]

    grouped: list[list[str]] = []
    for name in after:
        level = level_of(name)
        grouped.extend([] for _ in range(level + 1 - len(grouped)))
        grouped[level].append(name)
    return grouped


def dependents(after: After, service: str) -> list[str]:
    """Every service that waits, directly or through others, for ``service``, in bring-up order:
    what a failure of ``service`` blocks."""
    if service not in after:
        raise KeyError(service)
    blocked = {service}
    found: list[str] = []
    for name in (name for level in levels(after) for name in level):
        if blocked.intersection(after[name]):
            blocked.add(name)
            found.append(name)
    return found
