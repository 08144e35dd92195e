"""How commands reach a machine: the Host protocol and its local and SSH implementations."""

from __future__ import annotations

from pdtui.hosts.base import Host, HostError, Result, StatusCallback


def make_host(config, *, accept_new: bool = False, on_status: StatusCallback | None = None) -> Host:
    """The Host for one ``hosts:`` entry of a deployment config."""
    if config.local:
        from pdtui.hosts.local import LocalHost
        return LocalHost(config.name)
    from pdtui.hosts.ssh import SshHost
    return SshHost(config, accept_new=accept_new, on_status=on_status)


__all__ = ["Host", "HostError", "Result", "make_host"]
