"""The KV transfer fabric of the deployment's hosts: what a server that moves KV over RDMA, or with NIXL through
UCX, needs of its host.

A prefill and a decode that agree on every flag still cannot move KV when the
host's RDMA ports are down, the device a server names is not there, GPU
memory cannot be registered with the NIC (``nvidia_peermem`` not loaded), or
the unit may not pin the memory it registers (``LimitMEMLOCK``). SGLang finds
each only after its weights are loaded, or never (a failed registration shows
as failed transfers); UCX only warns of a device it was told to use and does
not find. ``sysfs`` reads what a host has, in one read-only remote command;
``ucx`` reads what a NIXL server's environment tells UCX; ``findings`` judges
each server against its host, and a pair on one host across NUMA nodes
(``topo`` reads whether NVLink joins their GPUs); ``side_channel`` judges
vLLM's NIXL side-channel ports against the other ports of their host.
"""
