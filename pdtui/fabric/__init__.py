"""The KV transfer fabric of the deployment's hosts: what a server that moves KV over RDMA needs of its host.

A prefill and a decode that agree on every flag still cannot move KV when the
host's RDMA ports are down, the device a server names is not there, GPU
memory cannot be registered with the NIC (``nvidia_peermem`` not loaded), or
the unit may not pin the memory it registers (``LimitMEMLOCK``). SGLang finds
each only after its weights are loaded, or never (a failed registration shows
as failed transfers). ``sysfs`` reads what a host has, in one read-only remote
command; ``findings`` judges each server against it.
"""
