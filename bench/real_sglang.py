"""Real SGLang under pdtui on the real manager, side by side with the sim's worker: what the bring-up costs.

One container (a real systemd and journald, a network of its own, reached over
real SSH: pdtui/sim/systemd_host.py). Each round brings up a prefill, a decode and
smg as units made from ``launch:`` blocks, first with real SGLang 0.5.23 on the
CPU serving the tiny model (pdtui/sim/real_sglang.py), then with the sim's worker
given the same flags and a start-up as long as real SGLang's was in that round,
then stops them. For each server, read from the journal and from pdtui's events
on one clock:

- ``own``: the server's own start, from its process's start (systemd's
  ExecMainStartTimestampMonotonic) to its ready line;
- ``ready_after_line``: from its ready line to pdtui's READY (its ``/health``,
  about a second on a CPU worker, and the bootstrap check);

and for the bring-up: ``reaction``, from the later ready line to the router's
``systemctl start``; ``router``, from that start to the router's READY (its own
start, its workers' activation, pdtui's probe and smoke generation);
``total``, from pdtui's start to all ready; ``overhead``, total less the slower
server's own start. Figures in seconds, medians over the rounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncssh
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, parse_args  # noqa: E402
from pdtui.config import Deployment, parse_config  # noqa: E402
from pdtui.engine.events import Done, PhaseStarted, StateChanged  # noqa: E402
from pdtui.engine.orchestrator import Orchestrator  # noqa: E402
from pdtui.hosts import make_host  # noqa: E402
from pdtui.sim import real_sglang  # noqa: E402
from pdtui.sim import systemd_host as container  # noqa: E402
from pdtui.sim.ports import free_port  # noqa: E402
from pdtui.sim.sshd import write_key  # noqa: E402
from pdtui.targets.systemd.unit_files import render_units  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SERVERS = ("prefill", "decode")


def config(port: int, model: Path, kind: str, startup: float) -> dict[str, Any]:
    """prefill, decode and smg on the container: real SGLang (``kind`` real) or the sim's worker with its flags."""
    p, d, r, boot = (free_port() for _ in range(4))

    def server(role: str) -> dict[str, Any]:
        launch = real_sglang.launch(role, model)
        if kind == "sim":
            del launch["python"]
            launch.update(command=[sys.executable, "-m", "pdtui.sim.worker"],
                          args=[*launch["args"], "--startup", f"{startup:.1f}"],
                          env={**launch["env"], "PYTHONPATH": str(REPO)})
        return launch

    return {"name": f"bench-{kind}", "hosts": {"cpu0": {"address": "127.0.0.1", "port": port, "user": "root"}},
            "services": {
                "prefill": {"host": "cpu0", "unit": f"{kind}-prefill", "role": "prefill", "port": p,
                            "bootstrap_port": boot, "timeout": "5m", "launch": server("prefill")},
                "decode": {"host": "cpu0", "unit": f"{kind}-decode", "role": "decode", "port": d, "timeout": "5m",
                           "launch": server("decode")},
                "router": {"host": "cpu0", "unit": f"{kind}-router", "role": "router", "port": r, "timeout": "5m",
                           "launch": {"package": "smg", "python": sys.executable, "host": "127.0.0.1",
                                      "prometheus_port": free_port()}}}}


def install(host: container.SystemdHost, deployment: Deployment) -> None:
    """The units ``pdtui units`` makes, written into the container and loaded."""
    for unit in render_units(deployment):
        subprocess.run(["nsenter", "-t", str(host.pid1), "-a", "sh", "-c", f"cat > /etc/systemd/system/{unit.name}"],
                       input=unit.text, text=True, check=True)
    host.run("systemctl", "daemon-reload")


async def bring_up(host: container.SystemdHost, deployment: Deployment) -> dict[str, float]:
    """One bring-up's figures (see the module's docstring)."""
    events: list[Any] = []
    epoch_less_monotonic = time.time() - time.monotonic()
    t0 = time.monotonic()
    orchestrator = Orchestrator(deployment, make_host)
    orchestrator.subscribe(events.append)
    try:
        done: Done = await orchestrator.run()
    finally:
        await orchestrator.close()
    if not done.ok:
        raise SystemExit(f"bench: the bring-up failed: {done.failures}")

    def at(kind: type, service: str, what: str) -> float:
        found = next(e for e in events if isinstance(e, kind) and e.service == service
                     and (e.phase if kind is PhaseStarted else e.new.value) == what)
        return found.at - epoch_less_monotonic if kind is PhaseStarted else t0 + found.elapsed

    figures: dict[str, float] = {}
    lines = {name: at(PhaseStarted, name, "ready") for name in SERVERS}
    for name in SERVERS:
        unit = deployment.services[name].unit
        started = int(host.run("systemctl", "show", "-p", "ExecMainStartTimestampMonotonic", "--value",
                               f"{unit}.service").stdout.strip()) / 1e6
        figures[f"{name}_own"] = lines[name] - started
        figures[f"{name}_ready_after_line"] = at(StateChanged, name, "ready") - lines[name]
    router_start = at(StateChanged, "router", "starting")
    figures["reaction"] = router_start - max(lines.values())
    figures["router"] = at(StateChanged, "router", "ready") - router_start
    figures["total"] = done.elapsed
    figures["overhead"] = done.elapsed - max(figures[f"{name}_own"] for name in SERVERS)
    units = [f"{deployment.services[name].unit}.service" for name in ("router", *SERVERS)]
    host.run("systemctl", "stop", *units, timeout=120)
    return figures


def ssh_home(folder: Path, host: container.SystemdHost) -> None:
    """$HOME whose ~/.ssh reaches the container, for this process and what it starts."""
    ssh = folder / ".ssh"
    ssh.mkdir(parents=True)
    write_key(ssh / "id_bench", host.client_key)
    (ssh / "config").write_text("Host *\n    IdentityFile ~/.ssh/id_bench\n")
    (ssh / "known_hosts").write_text(host.known_hosts_line)
    os.environ["HOME"] = str(folder)
    os.environ.pop("SSH_AUTH_SOCK", None)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], lambda p: p.add_argument("--rounds", type=int, default=3))
    for reason in (container.missing_reason(), real_sglang.missing_reason()):
        if reason:
            sys.exit(f"bench: {reason}")
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="pdtui-bench-real-") as tmp:
        folder = Path(tmp)
        model = real_sglang.make_model(folder, real_sglang.corpus())
        host = container.boot(folder / "container", private_network=True, binds={str(model): model},
                              client_key=asyncssh.generate_private_key("ssh-ed25519"))
        try:
            ssh_home(folder / "home", host)
            runs: dict[str, list[dict[str, float]]] = {"real": [], "sim": []}
            with host.network():
                for _ in range(rounds):
                    for kind in ("real", "sim"):
                        startup = (statistics.fmean(runs["real"][-1][f"{n}_own"] for n in SERVERS)
                                   if kind == "sim" else 0.0)
                        text = yaml.safe_dump(config(host.port, model, kind, startup), sort_keys=False)
                        deployment = parse_config(text, str(folder / f"{kind}.yaml"))
                        install(host, deployment)
                        runs[kind].append(asyncio.run(bring_up(host, deployment)))
        finally:
            host.stop()
    emit({"bench": "real_sglang", "rounds": rounds,
          **{kind: {key: round(statistics.median(run[key] for run in done), 3) for key in done[0]}
             for kind, done in runs.items()}})


if __name__ == "__main__":
    main()
