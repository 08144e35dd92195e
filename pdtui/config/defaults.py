"""Roles and the defaults they imply."""

from __future__ import annotations

from typing import Literal, get_args

Role = Literal["prefill", "decode", "router", "other"]
ROLES: tuple[str, ...] = get_args(Role)
ENGINES: tuple[str, ...] = ("sglang", "vllm")
"""The serving engines a server (and its router) may run: ``engine:``, per deployment or per service. Each is a
package of pdtui/servers/ (its ``ENGINES`` maps these names to them)."""
DEFAULT_ENGINE = "sglang"
COMMANDS: tuple[str, ...] = ("systemctl", "journalctl", "nvidia-smi")
BACKEND_ROLES = frozenset({"prefill", "decode"})

DEFAULT_TIMEOUT: dict[str, float] = {"prefill": 360.0, "decode": 360.0, "router": 120.0, "other": 300.0}
DEFAULT_UNHEALTHY_AFTER = 60.0   # after ready, health failing this long (and 3 checks in a row) fails a service
DEFAULT_CANARY = 30.0           # after ready, a router's canary generation this often
DEFAULT_BOOTSTRAP_PORT = 8998    # SGLang's --disaggregation-bootstrap-port default
DEFAULT_DIST_PORT = 50000        # a server over several nodes meets there, on rank 0's host (--dist-init-addr)
READY_LINES: dict[str, str] = {"sglang": "fired up and ready", "vllm": "Application startup complete"}
"""A server's default ready line, by its engine (a check's default, so the config's: it may be overridden)."""
# A rank >= 1 of a server over several nodes never says the above: it starts a dummy health server once its
# schedulers are ready (0.5.23's words first, then the older releases').
SGLANG_FOLLOWER_READY_LINE = (r"Dummy health check server started|Starting dummy health check server|"
                              r"Dummy health check server scheduled")

DEFAULT_PYTHON = "/usr/bin/python3"
"""What runs a launch that names neither its python nor its command."""
