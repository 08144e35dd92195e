"""GPU preflight and live GPU samples, wired through the orchestrator, on the sim."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import yaml

from pdtui.commands.units_command import write_units
from pdtui.config import parse_config
from pdtui.engine.events import Notice
from pdtui.engine.orchestrator import Orchestrator
from pdtui.gpus.sampler import GpuSample
from pdtui.hosts import make_host
from pdtui.targets.registry import Registry
from pdtui.targets.systemd.unit_files import render_units
from tests.engine_helpers import FAST, Recorder, bring_up, reference


def edited(deployment, edit):
    """The demo deployment with ``edit`` made to its config, and its units made again from it (as
    ``pdtui units --install`` would)."""
    config = yaml.safe_load(open(deployment.source))
    edit(config)
    changed = parse_config(yaml.safe_dump(config), deployment.source)
    write_units(render_units(changed), Path(deployment.source).parent / "units")
    return changed


async def test_busy_gpu_is_a_warning_and_the_bring_up_goes_on(sandbox):
    sandbox.set_gpu_busy(5, 40000, pids=[(77, "python3", 40000)])
    done, rec, _ = await bring_up(reference(sandbox))
    warnings = [n for n in rec.of(Notice) if n.level == "warning" and n.service == "decode"]
    assert warnings and "GPU 5 40000 MiB used by PID 77 python3" in warnings[0].text
    assert done.ok


async def test_busy_gpu_fails_its_service_before_anything_starts_when_strict(sandbox):
    sandbox.set_gpu_busy(5, 40000, pids=[(77, "python3", 40000)])
    deployment = edited(reference(sandbox), lambda c: c.update(strict=True))
    done, rec, _ = await bring_up(deployment)
    assert rec.states("decode") == ["failed"]
    assert "already in use" in rec.change("decode", "failed").reason
    assert rec.states("router") == ["blocked"]
    assert not done.ok


async def test_a_gpu_the_host_does_not_have_fails_preflight(sandbox):
    deployment = edited(reference(sandbox), lambda c: c["services"]["prefill"].update(gpus=[0, 1, 2, 8]))
    done, rec, _ = await bring_up(deployment)
    assert rec.change("prefill", "failed").reason == "GPU 8 does not exist on gpu0 (it has GPUs 0-7)"


async def test_preflight_alone_touches_no_unit(sandbox):
    sandbox.set_gpu_busy(5, 40000, pids=[(77, "python3", 40000)])
    recorder = Recorder()
    orchestrator = Orchestrator(edited(reference(sandbox), lambda c: c.update(strict=True)), Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    try:
        assert await orchestrator.preflight() is False
    finally:
        await orchestrator.close()
    assert not any(s in ("starting", "waiting") for name in ("prefill", "decode", "router")
                   for s in recorder.states(name))
    for unit in ("sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"):
        show = subprocess.run([*sandbox.commands["systemctl"], "show", "-p", "ActiveState,InvocationID", unit],
                              capture_output=True, text=True, check=True).stdout
        assert "ActiveState=inactive" in show and "InvocationID=\n" in show + "\n"


async def test_gpu_samples_flow_while_the_deployment_runs(sandbox):
    recorder = Recorder()
    orchestrator = Orchestrator(reference(sandbox), Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    try:
        await orchestrator.run()
        async with asyncio.timeout(10):
            while not recorder.of(GpuSample):
                await asyncio.sleep(0.05)
    finally:
        await orchestrator.close()
    sample = recorder.of(GpuSample)[-1]
    assert sample.host == "gpu0" and sorted(g.index for g in sample.gpus) == list(range(8))
    assert {g.numa for g in sample.gpus if g.index < 4} == {0} and {g.numa for g in sample.gpus if g.index >= 4} == {1}


def test_check_probe_runs_the_preflight_and_starts_nothing(sandbox):
    sandbox.set_gpu_busy(5, 40000, pids=[(77, "python3", 40000)])
    deployment = reference(sandbox)
    result = subprocess.run([sys.executable, "-m", "pdtui", "check", deployment.source, "--probe"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "warning: decode: a GPU on gpu0 already in use: GPU 5 40000 MiB used by PID 77 python3" in result.stdout
    assert result.stdout.rstrip().endswith("preflight passed")
    path = sandbox.root / "strict.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(open(deployment.source)) | {"strict": True}))
    result = subprocess.run([sys.executable, "-m", "pdtui", "check", str(path), "--probe"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "decode   FAILED" in result.stdout
