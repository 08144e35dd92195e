"""Scale: 64 services on 16 sim hosts over loopback SSH: bring-up overhead and connections.

16 sshd servers on distinct 127.0.0.1 ports, each in front of its own sim
sandbox; on each host two sim prefill workers, one sim decode worker and a
router after them (pdtui's small sim router: sixteen real routers would
measure the router, not pdtui). pdtui brings all 64 up headless in one run
(smoke generation on). overhead = wall time - the backends' own startup, the
longest "Started" -> ready line span in any host's journal. Connections are
counted at every sshd. The engine runs with its production timing (30 s command
timeout).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import deployment, emit, machine, parse_args, router_argv, worker_argv  # noqa: E402
from bench._journal import entries, own_startup  # noqa: E402
from bench._sshd import SshdPool  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sandbox import Sandbox  # noqa: E402
from pdtui.targets.registry import Registry  # noqa: E402

STARTUP = 3.0


def host_services(sandbox: Sandbox, host: str) -> dict:
    """Two prefills, a decode and a router on ``host``: its services' config entries."""
    p1, p2, d, r, b1, b2 = (free_port() for _ in range(6))
    services = {}
    for name, role, port, boot in ((f"{host}-prefill0", "prefill", p1, b1), (f"{host}-prefill1", "prefill", p2, b2),
                                   (f"{host}-decode", "decode", d, None)):
        unit = sandbox.add_unit(name, worker_argv(role, port, bootstrap=boot or free_port(), startup=STARTUP))
        services[name] = {"host": host, "unit": unit, "role": role, "port": port, "timeout": "120s"}
    router = sandbox.add_unit(f"{host}-router", router_argv(r, [(p1, b1), (p2, b2)], [d], package="sim"))
    services[f"{host}-router"] = {"host": host, "unit": router, "role": "router", "port": r, "timeout": "120s",
                                  "after": [f"{host}-prefill0", f"{host}-prefill1", f"{host}-decode"]}
    return services


async def bring_up(config: dict, where: Path) -> tuple[float, object]:
    orchestrator = Orchestrator(deployment(config, where), Registry(make_host))
    t0 = time.time()
    try:
        done = await orchestrator.run()
        wall = time.time() - t0
    finally:
        await orchestrator.close()
    return wall, done


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    n_hosts = 2 if args.quick else 16
    info = machine()
    pool = SshdPool()
    root = Path(tempfile.mkdtemp(prefix="pdtui-bench-scale-"))
    sandboxes: dict[str, Sandbox] = {}
    try:
        servers = {f"gpu{i:02d}": pool.start() for i in range(n_hosts)}
        config = {"name": "bench-scale", "hosts": {}, "services": {}}
        for host, server in servers.items():
            sandbox = sandboxes[host] = Sandbox.create(root / host)
            config["hosts"][host] = pool.host(server, sandbox)
            config["services"].update(host_services(sandbox, host))
        wall, done = asyncio.run(bring_up(config, root))
        if not done.ok:
            raise RuntimeError(f"bring-up failed: {done.failures}")
        spans = []
        for host, sandbox in sandboxes.items():
            journal = entries(sandbox)
            spans += [own_startup(sandbox, s["unit"], journal) for s in config["services"].values()
                      if s["host"] == host and s["role"] != "router"]
        own = max(ready - started for started, ready in spans)
        connections = [server.accepted_connections() for server in servers.values()]
    finally:
        for sandbox in sandboxes.values():
            sandbox.cleanup()
        shutil.rmtree(root, ignore_errors=True)
        pool.close()
    overhead = wall - own
    emit({"machine": info, "quick": args.quick, "hosts": n_hosts, "services": len(config["services"]),
          "backend_startup_setting_s": STARTUP, "wall_s": round(wall, 3), "backends_own_s": round(own, 3),
          "overhead_s": round(overhead, 3), "time_to_ready_max_s": max(done.time_to_ready.values()),
          "connections_per_host": connections, "connections_total": sum(connections),
          "target": {"overhead_s": 2.0, "met": overhead <= 2.0, "connections_met": set(connections) == {1}}})


if __name__ == "__main__":
    main()
