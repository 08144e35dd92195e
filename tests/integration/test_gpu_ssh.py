"""GPU inventory and sampling over real SSH: the stand-in behind sshd on 127.0.0.1, one connection."""

import asyncio

from pdtui.gpus.inventory import inventory
from pdtui.gpus.nvidia_smi import sampler_argv
from pdtui.gpus.sampler import GpuSampler
from tests.conftest_sim import wait_until
from tests.integration.test_gpu_sampler import Samples, stand_ins, stop
from tests.sshd import trust


async def test_inventory_and_sampler_over_one_connection(sandbox, sshd, ssh_home, make_host):
    trust(ssh_home, sshd)
    host = make_host(sshd.port)
    nvidia_smi = [str(sandbox.bin_dir / "nvidia-smi")]
    sandbox.set_gpu_busy(6, 3000, pids=[(4242, "python3", 2990)])
    inv = await inventory(host, nvidia_smi)
    assert [app.pid for app in inv.apps_on(6)] == [4242]
    assert dict(inv.numa) == {i: 0 if i < 4 else 1 for i in range(8)}

    samples = Samples()
    task = asyncio.create_task(GpuSampler(host, "gpu0", sampler_argv(nvidia_smi, interval_ms=50), samples,
                                          clock=lambda: 0.0, inventory=inv).run())
    try:
        (*_, last) = await samples.wait(2)
        assert len(stand_ins(sandbox.root)) == 1
    finally:
        await stop(task)
    assert last.gpus[6].memory_used_mib == 3000 and last.gpus[6].numa == 1
    assert sshd.accepted_connections() == 1
    assert wait_until(lambda: stand_ins(sandbox.root) == [], timeout=10)
