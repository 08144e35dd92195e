"""A deployment's life after its bring-up, on the sim: status, up again, restart, down."""

from __future__ import annotations

import asyncio

from pdtui.engine.events import Done, LogLines, Notice, ProbeResult, StateChanged, UnitStatus
from pdtui.engine.intent import Intent, Verb
from pdtui.sim.unit_store import UnitStore
from tests.engine_helpers import bring_up, reference

STATUS = Intent(Verb.STATUS)
DOWN = Intent(Verb.DOWN)


def invocations(sandbox, deployment) -> dict[str, str]:
    store = UnitStore(sandbox.root)
    return {name: store.read_state(svc.unit).invocation for name, svc in deployment.services.items()}


def commanded(rec) -> list[str]:
    """The reasons of every state change that ran a unit command (start, restart, stop)."""
    return [e.reason for e in rec.of(StateChanged) if e.new.value in ("starting", "stopping")]


async def test_status_of_a_running_deployment_judges_all_ready_and_commands_nothing(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    before = invocations(sandbox, deployment)
    done, rec, _ = await bring_up(deployment, intent=STATUS)
    assert done.ok and done.exit_code == 0, done
    assert commanded(rec) == []
    assert invocations(sandbox, deployment) == before
    for service in deployment.services:
        assert rec.states(service) == ["waiting", "ready"]
        assert rec.change(service, "waiting").reason.startswith("attached (active since ")
    units = {e.service: e for e in rec.of(UnitStatus)}
    assert units["decode"].active == "active" and units["decode"].invocation == before["decode"]
    assert units["decode"].uptime is not None and units["decode"].uptime >= 0
    smoke = [e for e in rec.of(ProbeResult) if e.service == "router" and e.check == "smoke"]
    assert smoke and smoke[-1].ok


async def test_status_of_a_deployment_never_started_says_stopped_and_exits_1(sandbox):
    deployment = reference(sandbox)
    done, rec, _ = await bring_up(deployment, intent=STATUS)
    assert not done.ok and done.exit_code == 1
    assert commanded(rec) == []
    for service in deployment.services:
        assert rec.states(service) == ["stopped"]
        assert "inactive" in done.failures[service]


async def test_up_on_a_running_deployment_attaches_and_finds_no_busy_gpus(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    before = invocations(sandbox, deployment)
    done, rec, _ = await bring_up(deployment)
    assert done.ok, done
    assert commanded(rec) == []
    assert all(rec.change(s, "waiting").reason.startswith("already running: attached") for s in deployment.services)
    assert invocations(sandbox, deployment) == before
    assert not [n for n in rec.of(Notice) if "already in use" in n.text]


async def test_up_restart_starts_running_units_afresh(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    before = invocations(sandbox, deployment)
    done, rec, _ = await bring_up(deployment, intent=Intent(fresh=True))
    assert done.ok, done
    after = invocations(sandbox, deployment)
    assert all(after[s] != before[s] for s in deployment.services)
    assert rec.index("router", "starting") > max(rec.index("prefill", "ready"), rec.index("decode", "ready"))


async def test_restart_decode_drains_it_through_the_router_which_serves_on_and_is_never_restarted(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    before = invocations(sandbox, deployment)
    done, rec, _ = await bring_up(deployment, intent=Intent(Verb.RESTART, ("decode",)))
    assert done.ok, done
    after = invocations(sandbox, deployment)
    assert after["decode"] != before["decode"]
    assert after["prefill"] == before["prefill"] and after["router"] == before["router"]
    assert commanded(rec) == [f"systemctl restart {deployment.services['decode'].unit}"]
    assert "pending" not in rec.states("router"), "judged as it ran, then serving throughout"
    said = [n.text for n in rec.of(Notice) if n.service in ("decode", "router")]
    assert said[0] == "router: decode is its only decode: it answers 503 while decode is out, and serves again once it is back"
    assert said[1] == "decode: taking it out of router (drain, at most 2m)"
    assert said[2].startswith("decode: out of router")
    assert said[-1] == "decode: back in router"
    out = next(i for i, e in enumerate(rec.events) if isinstance(e, Notice) and e.text.startswith("decode: out of"))
    restarted = next(i for i, e in enumerate(rec.events) if isinstance(e, StateChanged) and e.service == "decode"
                     and e.new.value == "starting")
    assert out < restarted, "out of the router before its restart"


async def test_restart_decode_without_drain_restarts_it_alone_and_proves_the_router_again(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    before = invocations(sandbox, deployment)
    done, rec, _ = await bring_up(deployment, intent=Intent(Verb.RESTART, ("decode",), drain=False))
    assert done.ok, done
    after = invocations(sandbox, deployment)
    assert after["decode"] != before["decode"]
    assert after["prefill"] == before["prefill"] and after["router"] == before["router"]
    assert commanded(rec) == [f"systemctl restart {deployment.services['decode'].unit}"]
    # Judged as it ran, then back to waiting for decode, then proven again without a restart of its own.
    assert rec.states("router") == ["waiting", "ready", "pending", "waiting", "ready"]
    changes = [(i, e) for i, e in enumerate(rec.events) if isinstance(e, StateChanged)]
    back = next(i for i, e in changes if e.service == "router" and e.new.value == "pending")
    assert rec.events[back].reason == "waiting for decode"
    decode_ready = max(i for i, e in changes if e.service == "decode" and e.new.value == "ready")
    again = max(i for i, e in changes if e.service == "router" and e.new.value == "waiting")
    assert back < decode_ready < again and rec.events[again].reason.startswith("attached")
    smoke = [e for e in rec.of(ProbeResult) if e.service == "router" and e.check == "smoke"]
    assert smoke and smoke[-1].ok


async def test_restart_of_a_prefill_alone_warns_that_decode_keeps_its_endpoints(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    done, rec, _ = await bring_up(deployment, intent=Intent(Verb.RESTART, ("prefill",)))
    assert done.ok, done
    warning = next(n for n in rec.of(Notice) if n.service == "prefill" and n.level == "warning")
    assert "decode" in warning.text and "--with-dependents" in warning.text


async def test_restart_with_dependents_restarts_the_decode_beside_a_prefill_and_the_router(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    before = invocations(sandbox, deployment)
    done, rec, _ = await bring_up(deployment, intent=Intent(Verb.RESTART, ("prefill",), with_dependents=True))
    assert done.ok, done
    after = invocations(sandbox, deployment)
    assert all(after[s] != before[s] for s in deployment.services)
    assert rec.index("router", "starting") > max(rec.index("prefill", "ready"), rec.index("decode", "ready"))


async def test_down_stops_the_router_first_then_the_backends_and_their_gpus(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    done, rec, _ = await bring_up(deployment, intent=DOWN)
    assert done.ok and done.exit_code == 0, done
    assert rec.index("router", "stopped") < min(rec.index("prefill", "stopping"), rec.index("decode", "stopping"))
    store = UnitStore(sandbox.root)
    assert {store.read_state(svc.unit).active for svc in deployment.services.values()} <= {"inactive", "failed"}
    released = [e for e in rec.of(ProbeResult) if e.check == "gpus" and e.ok]
    assert {e.service for e in released} == {"prefill", "decode"}
    done, rec, _ = await bring_up(deployment, intent=STATUS)
    assert done.exit_code == 1


async def test_up_on_a_running_deployment_still_names_a_foreign_process_on_its_gpus(sandbox):
    deployment = reference(sandbox)
    assert (await bring_up(deployment))[0].ok
    sandbox.set_gpu_busy(5, 2048, [(999_999, "python3", 2048)])
    done, rec, _ = await bring_up(deployment)
    busy = [n.text for n in rec.of(Notice) if "already in use" in n.text]
    assert len(busy) == 1 and busy[0].startswith("decode:") and "PID 999999 python3" in busy[0], busy


async def test_a_restart_from_the_screen_drains_the_decode_and_tells_a_new_outcome(sandbox):
    from pdtui.engine.orchestrator import Orchestrator
    from pdtui.hosts import make_host
    from pdtui.targets.registry import Registry
    from tests.engine_helpers import FAST, Recorder
    deployment = reference(sandbox)
    recorder = Recorder()
    orchestrator = Orchestrator(deployment, Registry(make_host), timing=FAST)
    orchestrator.subscribe(recorder)
    try:
        assert (await orchestrator.run()).ok
        assert orchestrator.restart("decode")
        assert not orchestrator.restart("decode")      # draining already: not again
        for _ in range(300):
            await asyncio.sleep(0.05)
            if len(recorder.of(Done)) == 2:
                break
    finally:
        await orchestrator.close()
    assert [d.ok for d in recorder.of(Done)] == [True, True]
    assert recorder.states("router")[:3] == ["starting", "waiting", "ready"]
    assert "pending" not in recorder.states("router") and recorder.states("router")[-1] == "ready"
    assert recorder.states("decode")[-4:] == ["pending", "starting", "waiting", "ready"]


async def test_status_of_a_long_running_unit_reads_its_tail_and_finds_its_old_ready_line(each_journal, monkeypatch):
    """A server up for days has written far more than is worth reading: the last lines, plus the telling old ones."""
    from pdtui.sim.ports import free_port
    from pdtui.targets.systemd import shared_commands as units
    from tests.engine_helpers import sim_deployment, worker_argv
    sandbox = each_journal
    port, boot = free_port(), free_port()
    deployment = sim_deployment(sandbox, {"decode": (worker_argv("decode", port, bootstrap=boot, log_rate=400),
                                                     {"role": "decode", "port": port, "timeout": "30s"})})
    assert (await bring_up(deployment))[0].ok
    monkeypatch.setattr(units, "ATTACH_LINES", 50)
    await asyncio.sleep(1.0)           # hundreds of batch lines after the ready line
    greps: list[list[str]] = []
    read: list[list] = []
    real_attached = units.attached_history

    async def counted(run, commands, invocation, telling, start=None, limit=None):
        async def recording(argv, deadline):
            if any(a.startswith("--grep=") for a in argv):
                greps.append(argv)
            return await run(argv, deadline)
        assert start is not None            # the grep looks at the unit's start-up only
        read.append(await real_attached(recording, commands, invocation, telling, start, limit))
        return read[-1]

    monkeypatch.setattr("pdtui.targets.systemd.unit_run.attached_history", counted)
    done, rec, _ = await bring_up(deployment, intent=STATUS)
    assert done.ok, done
    assert len(greps) == 1                      # the tail alone did not hold the ready line
    [history] = read
    assert 50 < len(history) < 100              # the last 50 and the few telling ones, not the 400+ written
    assert "fired up and ready" in history[len(history) - 51].message   # the newest telling line, before the tail
    shown = [line.text for batch in rec.of(LogLines) for line in batch.lines]
    assert any("fired up and ready" in text for text in shown)
