"""How often a bring-up looks at things: one set of intervals, shortened by tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timing:
    """How often things are looked at. Tests shorten these."""

    poll: float = 0.5          # HTTP/TCP/router probes while waiting
    watch_poll: float = 10.0   # the health check of a ready service
    line_probe_gap: float = 0.05   # a new line of a service being probed brings its next probe this close
    router_poll: float = 0.1   # a starting router's probe until its generation: its answers cost it nothing
    unit_poll: float = 2.0     # `systemctl show` while waiting (systemd's own lines wake it sooner)
    unit_watch: float = 10.0   # ... once ready, where the target logs a run's end: a backstop to those lines
    settle: float = 0.3        # after a first failure line, wait this long for a more telling one
    cause: float = 2.0         # a crash's traceback: wait at most this long past the settle for its exception
    last_lines: float = 2.0    # a unit seen over: wait this long at most for its last lines (and systemd's on its end)
    log_batch: float = 0.05    # log lines are handed to subscribers in batches this often
    command_timeout: float = 30.0
    figures_poll: float = 3.0     # a shown server's serving figures (/metrics: each read is a line in its log)
    transfer_poll: float = 10.0   # a serving backend's KV transfer queues (its /metrics), shown or not
    transfer_stall: float = 30.0  # ... requests held there this long with none moving on are warned of
    stop_timeout: float = 120.0   # pdtui down: a unit's stop and its GPUs' release, each service


DEFAULT_TIMING = Timing()
