"""The preflight over loopback SSH, alone: from the engine's first step to its verdict on one host.

The reference deployment (a prefill on GPUs 0-3, a decode on 4-7, a router) is
installed as units in a sandbox and looked at through sshd, as ``pdtui check
--probe`` does: the unit looks and installed files, the GPU inventory, the
fabric, the servers' command lines judged. Each run is a fresh process's
orchestrator on a fresh SSH connection, so the connection's set-up counts.

``--no-sysfs`` leaves the host's ``sysfs:`` unset (a tree of pdtui that has no
such setting reads the machine's own, where the sim's GPUs are not: their NUMA
nodes then come from ``nvidia-smi topo -m``), to compare with such a tree.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import deployment, emit, parse_args, summary, worker_argv  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402


def config(sandbox: Sandbox, host: dict) -> dict:
    p, d, r, boot = (free_port() for _ in range(4))
    units = {"prefill": sandbox.add_unit("pf-p", worker_argv("prefill", p, bootstrap=boot),
                                         env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}),
             "decode": sandbox.add_unit("pf-d", worker_argv("decode", d, bootstrap=boot),
                                        env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"}),
             "router": sandbox.add_unit("pf-r", ["/bin/sleep", "600"])}
    fields = {"prefill": {"port": p, "gpus": [0, 1, 2, 3], "bootstrap_port": boot},
              "decode": {"port": d, "gpus": [4, 5, 6, 7]}, "router": {"port": r}}
    return {"name": "bench-preflight", "hosts": {"h": host},
            "services": {name: {"host": "h", "unit": units[name], "role": name, **fields[name]} for name in units}}


async def preflight(doc: dict, where: Path) -> float:
    orchestrator = Orchestrator(deployment(doc, where), Registry(make_host))
    t0 = time.perf_counter()
    try:
        ok = await orchestrator.preflight()
        took = time.perf_counter() - t0
    finally:
        await orchestrator.close()
    if not ok:
        raise RuntimeError("the preflight failed")
    return took


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument("--no-sysfs", action="store_true"))
    runs = 2 if args.quick else 15
    pool = SshdPool()
    sandbox = Sandbox.create(Path(tempfile.mkdtemp(prefix="pdtui-bench-sim-")))
    try:
        server = pool.start()
        host = pool.host(server, sandbox)
        host["commands"]["nvidia-smi"] = str(sandbox.bin_dir / "nvidia-smi")
        if not args.no_sysfs:
            host["sysfs"] = str(sandbox.sysfs)
        doc = config(sandbox, host)
        took = [asyncio.run(preflight(doc, sandbox.root)) for _ in range(runs)]
    finally:
        sandbox.cleanup()
        pool.close()
    emit({"unit": "s", "quick": args.quick, "sysfs": not args.no_sysfs, "runs": runs,
          "preflight_over_ssh": summary(took, 1, 3)})


if __name__ == "__main__":
    main()
