"""Roles and the defaults they imply."""

from __future__ import annotations

from typing import Literal, get_args

Role = Literal["prefill", "decode", "router", "other"]
ROLES: tuple[str, ...] = get_args(Role)
COMMANDS: tuple[str, ...] = ("systemctl", "journalctl", "nvidia-smi")
BACKEND_ROLES = frozenset({"prefill", "decode"})

DEFAULT_TIMEOUT: dict[str, float] = {"prefill": 360.0, "decode": 360.0, "router": 120.0, "other": 300.0}
DEFAULT_UNHEALTHY_AFTER = 60.0   # after ready, health failing this long (and 3 checks in a row) fails a service
DEFAULT_CANARY = 30.0           # after ready, a router's canary generation this often
DEFAULT_BOOTSTRAP_PORT = 8998    # SGLang's --disaggregation-bootstrap-port default
SGLANG_READY_LINE = "fired up and ready"
