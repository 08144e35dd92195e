"""How a server that moves KV with NIXL uses UCX, read from its command line and environment as it will run.

NIXL moves KV through a plugin, UCX unless told otherwise (SGLang:
``SGLANG_DISAGGREGATION_NIXL_BACKEND``, default ``UCX``; vLLM: the
``backends`` of ``--kv-transfer-config``'s ``kv_connector_extra_config``,
default ``["UCX"]``). NIXL names no device itself (SGLang's
``--disaggregation-ib-device`` is Mooncake's alone): UCX picks among every
device of the host unless its environment narrows it:

- ``UCX_NET_DEVICES``: the network devices it may use, each as UCX names it,
  an RDMA port with its number (``mlx5_0:1``) and an interface by its name
  (``eth0``), or ``all``. UCX matches the names exactly and only warns of one
  it does not find (``network device 'mlx5_3:1' is not available, please use
  one or more of: ...``), going on with what is left.
- ``UCX_TLS``: the transports it may use (``rc,cuda_copy``), ``all``, or a
  list to leave out after ``^``; a name may end ``:aux`` or begin with ``\\``.

Pure: what is read here is judged against the host in findings.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pdtui.servers import ServerCommand, TransferPath
from pdtui.servers.vllm.launch import KV_TRANSFER_CONFIG
from pdtui.support.argv import flag_value

NIXL = "nixl"
PLUGIN = "UCX"
SGLANG_PLUGIN_ENV = "SGLANG_DISAGGREGATION_NIXL_BACKEND"
TLS_ENV = "UCX_TLS"
NET_DEVICES_ENV = "UCX_NET_DEVICES"
ALL = "all"
# UCX's transports (and its aliases for them) that need an RDMA device: InfiniBand and RoCE verbs, and mlx5's own.
RDMA_TRANSPORTS = frozenset({"ib", "rc", "ud", "dc", "rc_x", "ud_x", "dc_x", "rc_v", "ud_v", "rc_verbs", "ud_verbs",
                             "rc_mlx5", "ud_mlx5", "dc_mlx5"})
GPU_IPC = frozenset({"cuda", "cuda_ipc"})      # UCX_TLS's names that let UCX copy GPU to GPU within a host
# Transports that move nothing between two processes on their own (no active messages to connect by): they ride
# beside a network or shared-memory transport.
RIDERS = frozenset({"self", "cuda", "cuda_copy", "cuda_ipc", "gdr_copy", "rocm", "rocm_copy", "rocm_ipc", "rocm_gdr",
                    "ze_copy", "ze_ipc"})


@dataclass(frozen=True, slots=True)
class Ucx:
    """What a NIXL server's environment tells UCX: its transports (``UCX_TLS`` as given, None: unset) and the network
    devices it names (``UCX_NET_DEVICES``; empty: unset or ``all``)."""

    tls: str | None = None
    net_devices: tuple[str, ...] = ()

    @property
    def _transports(self) -> tuple[bool, frozenset[str]]:
        """Whether ``UCX_TLS`` lists what to leave out (``^...``), and the transports it names (bare)."""
        given = (self.tls or "").strip()
        deny = given.startswith("^")
        names = frozenset(name.strip().lstrip("\\").removesuffix(":aux")
                          for name in given.removeprefix("^").split(",") if name.strip())
        return deny, names

    @property
    def rdma_only(self) -> bool:
        """``UCX_TLS`` allows RDMA transports and nothing else that connects two processes (no ``tcp``, no shared
        memory, not ``all``): without an RDMA port UCX has no transport at all."""
        deny, names = self._transports
        if self.tls is None or deny or ALL in names:
            return False
        return bool(names & RDMA_TRANSPORTS) and names <= RDMA_TRANSPORTS | RIDERS

    @property
    def allows_rdma(self) -> bool:
        """Whether ``UCX_TLS`` leaves UCX an RDMA transport to try."""
        deny, names = self._transports
        if self.tls is None or ALL in names:
            return True
        return "ib" not in names if deny else bool(names & RDMA_TRANSPORTS)

    @property
    def gpu_ipc(self) -> bool:
        """Whether ``UCX_TLS`` leaves UCX ``cuda_ipc``: GPU to GPU within a host, no NIC in the way."""
        deny, names = self._transports
        if self.tls is None or ALL in names:
            return True
        return not names & GPU_IPC if deny else bool(names & GPU_IPC)


def nixl_ucx(path: TransferPath, command: ServerCommand) -> Ucx | None:
    """How a server uses UCX, when it moves KV with NIXL through UCX (None: another backend, or another plugin)."""
    if path.backend != NIXL or not _ucx_plugin(command):
        return None
    env = command.env
    devices = tuple(d.strip() for d in env.get(NET_DEVICES_ENV, "").split(",") if d.strip())
    return Ucx(env.get(TLS_ENV), () if ALL in devices else devices)


def _ucx_plugin(command: ServerCommand) -> bool:
    """Whether NIXL's plugin is UCX: SGLang's environment says, or vLLM's ``--kv-transfer-config``."""
    if command.env.get(SGLANG_PLUGIN_ENV, PLUGIN).strip() != PLUGIN:
        return False
    given = flag_value(command.words, KV_TRANSFER_CONFIG)
    try:
        config = json.loads(given) if given is not None else None
    except ValueError:
        return True
    extra = config.get("kv_connector_extra_config") if isinstance(config, dict) else None
    backends = extra.get("backends") if isinstance(extra, dict) else None
    return not isinstance(backends, list) or PLUGIN in backends
