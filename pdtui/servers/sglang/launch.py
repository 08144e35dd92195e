"""What a service's ``launch:`` block runs: SGLang's server and a PD router, their flags and URLs.

Wherever it runs: a unit's ExecStart (targets/systemd/unit_files.py), a job's
command (targets/slurm/script.py). Pure: the command depends on the config
alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pdtui.config import DEFAULT_BOOTSTRAP_PORT, Deployment, ServiceConfig
from pdtui.config.launch import ROUTER_PYTHON_PACKAGES, LaunchSpec
from pdtui.servers import CommandFlags
from pdtui.servers.programs import listen_host, program
from pdtui.support.argv import flag_value

SERVER_MODULE = "sglang.launch_server"
DEFAULT_PORT = 30000                  # the server's own, without --port

FLAGS = CommandFlags(port="--port", default_port=DEFAULT_PORT, mode="--disaggregation-mode",
                     bootstrap_port="--disaggregation-bootstrap-port", default_bootstrap_port=DEFAULT_BOOTSTRAP_PORT,
                     base_gpu="--base-gpu-id", tp=("--tp", "--tp-size"), numa="--numa-node",
                     backends={"prefill": "--prefill", "decode": "--decode"}, server=SERVER_MODULE)
"""The flags of the command lines above, as a unit written by hand is read back."""


def runs_server(words: Sequence[str]) -> bool:
    """Whether the command is SGLang's server itself (not a wrapper script that may set its flags)."""
    return any("launch_server" in word for word in words) or any(
        word.rpartition("/")[2] == "sglang" and nxt == "serve" for word, nxt in zip(words, words[1:], strict=False))


def roles_of(words: Sequence[str]) -> frozenset[str] | None:
    """The PD role a command line plays, by its ``--disaggregation-mode``; None when it gives none (not PD, or a
    wrapper script that sets it itself)."""
    mode = flag_value(words, FLAGS.mode)
    return frozenset({mode}) if mode is not None else None


def environment(deployment: Deployment, svc: ServiceConfig) -> dict[str, str]:
    """What a server's environment needs beside its launch's own: nothing, its command line says all."""
    return {}


def command_line(deployment: Deployment, svc: ServiceConfig, prometheus_port: int | None = None,
                 backend_urls: Mapping[str, str] | None = None) -> list[str]:
    """What the service's ``launch:`` block runs: its unit's ExecStart (before any numactl), and its job's command.

    ``backend_urls``: a router's backends where they are known only at run time
    (jobs on nodes Slurm picked), by service name.
    """
    assert svc.launch is not None
    if svc.is_router:
        return _router_argv(deployment, svc, svc.launch, prometheus_port, backend_urls or {})
    return _server_argv(deployment, svc, svc.launch)


def _server_argv(deployment: Deployment, svc: ServiceConfig, launch: LaunchSpec) -> list[str]:
    argv = [*program(launch, SERVER_MODULE), "--model-path", launch.model or "", "--tp",
            str(launch.tp or max(1, svc.gpu_count) * svc.nnodes), "--host", listen_host(deployment, svc)]
    if svc.port is not None:
        argv += ["--port", str(svc.port)]
    if svc.nnodes > 1:      # one unit per node, each its rank of the one server
        argv += [FLAGS.nnodes, str(svc.nnodes), FLAGS.node_rank, str(svc.rank), FLAGS.dist_init_addr,
                 deployment.dist_addr(svc)]
    argv += ["--disaggregation-mode", svc.role, "--disaggregation-transfer-backend", launch.transfer_backend]
    if svc.role == "prefill":
        argv += ["--disaggregation-bootstrap-port", str(svc.bootstrap_port or DEFAULT_BOOTSTRAP_PORT)]
    if launch.ib_device:
        argv += ["--disaggregation-ib-device", launch.ib_device]
    return argv + list(launch.args)


def _router_argv(deployment: Deployment, svc: ServiceConfig, launch: LaunchSpec, prometheus_port: int | None,
                 backend_urls: Mapping[str, str]) -> list[str]:
    argv = [*program(launch, f"{ROUTER_PYTHON_PACKAGES[launch.package]}.launch_router"), "--pd-disaggregation"]

    def url(backend: ServiceConfig) -> str:
        return backend_urls.get(backend.name) or deployment.backend_url(svc, backend)

    for name in svc.after:
        backend = deployment.services[name]
        if backend.role == "prefill" and backend.port is not None:
            argv += ["--prefill", url(backend), str(backend.bootstrap_port or DEFAULT_BOOTSTRAP_PORT)]
    for name in svc.after:
        backend = deployment.services[name]
        if backend.role == "decode" and backend.port is not None:
            argv += ["--decode", url(backend)]
    host = launch.host or "0.0.0.0"     # clients come from anywhere, unless the launch says otherwise
    argv += ["--host", host, "--port", str(svc.port)]
    if launch.policy:
        argv += ["--policy", launch.policy]
    if prometheus_port is not None:
        argv += ["--prometheus-host", host, "--prometheus-port", str(prometheus_port)]
    return argv + list(launch.args)
