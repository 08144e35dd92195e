"""The run history: what a bring-up's events leave in SQLite, and how history and report read it back."""

from __future__ import annotations

import json
from pathlib import Path

from pdtui.cli import main
from pdtui.commands.history import critical_path, history_line, report_text
from pdtui.engine.events import (
    Done,
    Drained,
    PhaseStarted,
    PlanReady,
    ServiceInfo,
    StateChanged,
    Step,
    StepChanged,
    StepStatus,
    UnitStatus,
)
from pdtui.engine.states import ServiceState as S
from pdtui.faces.run_history import HistoryRecorder, connect, history_path, load_runs


def info(name: str, role: str, after: tuple[str, ...] = ()) -> ServiceInfo:
    return ServiceInfo(name, role, f"{name}.service", "gpu-a", (0,), 0, 30000, after, 600.0)


PLAN = PlanReady("dsv4", (info("prefill", "prefill"), info("decode", "decode"),
                          info("router", "router", ("prefill", "decode"))), tuple(Step))


def backend(name: str, start: float, phases: list[tuple[str, float]], ready: float) -> list:
    events: list = [StateChanged(name, S.PENDING, S.STARTING, elapsed=start),
                    UnitStatus(name, "activating", "start", invocation=f"{name}-inv", elapsed=start),
                    StateChanged(name, S.STARTING, S.WAITING, elapsed=start)]
    events += [PhaseStarted(name, phase, start + at, at=1000.0 + at) for phase, at in phases]
    events.append(StateChanged(name, S.WAITING, S.READY, "all checks hold", elapsed=ready, time_to_ready=ready - start))
    return events


def a_bring_up() -> list:
    return [
        PLAN,
        StepChanged(Step.START_BACKENDS, StepStatus.RUNNING, elapsed=0.5),
        *backend("prefill", 0.5, [("weights", 1.0), ("kv_cache", 30.0), ("cuda_graphs", 33.0), ("ready", 40.0)], 41.0),
        *backend("decode", 0.5, [("weights", 1.0), ("kv_cache", 42.0), ("cuda_graphs", 45.0), ("ready", 57.0)], 58.0),
        StepChanged(Step.START_ROUTER, StepStatus.RUNNING, elapsed=58.0),
        StateChanged("router", S.PENDING, S.STARTING, elapsed=58.0),
        StateChanged("router", S.STARTING, S.WAITING, elapsed=58.2),
        StateChanged("router", S.WAITING, S.READY, elapsed=60.0, time_to_ready=2.0),
        StepChanged(Step.DONE, StepStatus.DONE, elapsed=60.0),
        Done(True, 0, {"prefill": 40.5, "decode": 57.5, "router": 2.0}, elapsed=60.0),
    ]


def record(path: Path, events: list) -> HistoryRecorder:
    recorder = HistoryRecorder(path, clock=lambda: 1_750_000_000.0)
    for event in events:
        recorder(event)
    return recorder


def test_a_bring_up_is_kept_with_each_services_outcome_invocation_and_phase_durations(tmp_path):
    path = tmp_path / "h.sqlite3"
    assert record(path, a_bring_up()).error is None
    [run] = load_runs(connect(path, create=False))
    assert (run.deployment, run.ok, run.exit_code, run.elapsed) == ("dsv4", True, 0, 60.0)
    decode = run.services["decode"]
    assert (decode.outcome, decode.invocation, decode.time_to_ready) == ("ready", "decode-inv", 57.5)
    assert decode.durations() == {"weights": 41.0, "kv_cache": 3.0, "cuda_graphs": 12.0}
    assert ("start router", "running", "", 58.0) in run.steps


def test_a_later_done_of_the_same_bring_up_rewrites_its_run(tmp_path):
    path = tmp_path / "h.sqlite3"
    events = a_bring_up()
    events[-1] = Done(False, 1, failures={"decode": "CUDA out of memory"}, elapsed=60.0)
    events += [Done(True, 0, elapsed=90.0)]
    record(path, events)
    [run] = load_runs(connect(path, create=False))
    assert (run.ok, run.elapsed) == (True, 90.0)


def test_a_watch_and_a_take_down_are_not_runs(tmp_path):
    path = tmp_path / "h.sqlite3"
    record(path, [PlanReady("dsv4", PLAN.services, (), watching=True), Done(True, 0)])
    record(path, [PlanReady("dsv4", PLAN.services, (), title="taking down"), Done(True, 0)])
    assert not path.exists()


def test_an_unwritable_history_is_an_error_kept_never_raised(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    recorder = record(blocker / "sub" / "h.sqlite3", a_bring_up())
    assert recorder.error and "cannot open the run history" in recorder.error


def test_the_critical_path_runs_from_the_router_back_through_the_slower_backend(tmp_path):
    path = tmp_path / "h.sqlite3"
    record(path, a_bring_up())
    [run] = load_runs(connect(path, create=False))
    assert [s.name for s in critical_path(run)] == ["router", "decode"]
    text = report_text(run)
    assert "router ready @1m00s +2.0s" in text
    assert "└ decode ready @58s +58s, longest phase weights 41s" in text
    assert "    cuda_graphs  12s" in text
    assert history_line(run).endswith("dsv4  ready  prefill 40s · decode 58s · router 2.0s")


def test_the_history_lives_in_the_xdg_state_folder():
    assert history_path({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path("/s/pdtui/history.sqlite3")
    assert history_path({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == Path("/h/.local/state/pdtui/history.sqlite3")


def run_cli(monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_history_and_report_commands_read_the_state_folders_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    record(history_path(), a_bring_up())
    code, out, _ = run_cli(monkeypatch, capsys, "history")
    assert code == 0 and out.startswith("#1  ") and "dsv4  ready" in out
    code, out, _ = run_cli(monkeypatch, capsys, "history", "--json")
    assert json.loads(out)["services"]["decode"]["phases"]["weights"] == 41.0
    code, out, _ = run_cli(monkeypatch, capsys, "report", "#1")
    assert code == 0 and out.startswith("run #1  dsv4: bringing up") and "critical path" in out


def test_bad_runs_and_a_missing_history_are_one_line_each(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    code, _, err = run_cli(monkeypatch, capsys, "report")
    assert code == 1 and err.count("\n") == 1 and "no run history yet" in err
    record(history_path(), a_bring_up())
    code, _, err = run_cli(monkeypatch, capsys, "report", "latest")
    assert code == 2 and err.count("\n") == 1
    code, _, err = run_cli(monkeypatch, capsys, "report", "7")
    assert code == 1 and "no run #7" in err
    history_path().write_bytes(b"not a database" * 100)
    code, _, err = run_cli(monkeypatch, capsys, "history")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err


def test_last_ready_gives_each_services_phases_of_its_newest_ready_run(tmp_path):
    from pdtui.faces.run_history import last_ready
    path = tmp_path / "history.sqlite3"
    assert last_ready(path, "dsv4") == {} and not path.exists()      # no history: nothing, and no file made
    record(path, a_bring_up())
    failed = [e for e in a_bring_up() if not (isinstance(e, StateChanged) and e.service == "decode"
                                              and e.new is S.READY)]
    record(path, [*failed[:-1], StateChanged("decode", S.WAITING, S.FAILED, "oom", elapsed=50.0),
                  Done(False, 1, {}, {"decode": "oom"}, elapsed=50.0)])
    last = last_ready(path, "dsv4")
    assert last["decode"] == {"weights": 41.0, "kv_cache": 3.0, "cuda_graphs": 12.0}   # the older, ready run's
    assert last["prefill"] == {"weights": 29.0, "kv_cache": 3.0, "cuda_graphs": 7.0}
    assert last_ready(path, "another") == {}


def test_a_phase_three_times_as_long_as_last_time_is_warned_in_the_headless_lines():
    import io

    from pdtui.faces.headless import LinePrinter
    out = io.StringIO()
    printer = LinePrinter(out, baseline={"decode": {"weights": 13.0, "kv_cache": 3.0}})
    printer(PLAN)
    for event in backend("decode", 0.5, [("weights", 1.0), ("kv_cache", 42.0), ("cuda_graphs", 45.0)], 58.0):
        printer(event)
    lines = out.getvalue().splitlines()
    warnings = [line for line in lines if "warning:" in line]
    assert len(warnings) == 1
    assert "decode: weights took 41s, 3.2× the last successful run's 13s" in warnings[0]
    assert lines.index(warnings[0]) < next(i for i, line in enumerate(lines) if "phase kv_cache" in line)


def test_an_interrupted_bring_up_is_kept_with_each_service_as_far_as_it_got(tmp_path):
    path = tmp_path / "h.sqlite3"
    events = a_bring_up()
    cut = next(i for i, e in enumerate(events) if isinstance(e, StateChanged) and e.service == "router")
    recorder = record(path, events[:cut])
    recorder.interrupted(130)
    [run] = load_runs(connect(path, create=False))
    assert (run.ok, run.exit_code, run.elapsed) == (False, 130, 58.0)
    assert run.services["decode"].outcome == "ready"
    router = run.services["router"]
    assert (router.outcome, router.reason) == ("interrupted", "interrupted while pending")


def test_an_interrupt_after_the_outcome_changes_nothing(tmp_path):
    path = tmp_path / "h.sqlite3"
    record(path, a_bring_up()).interrupted(130)
    [run] = load_runs(connect(path, create=False))
    assert (run.ok, run.exit_code) == (True, 0)


def test_history_says_a_run_was_interrupted(tmp_path):
    path = tmp_path / "h.sqlite3"
    record(path, a_bring_up()[:5]).interrupted(130)
    [run] = load_runs(connect(path, create=False))
    assert "  interrupted  " in history_line(run)


def a_drained_restart() -> list:
    return [PlanReady("dsv4", PLAN.services, (), title="rolling restart of decode, prefill"),
            Drained("decode", ("router",), "back", idle_after=1.25, cut=0, out_for=74.0, elapsed=75.0),
            Drained("prefill", ("router",), "left out", idle_after=120.0, cut=3, out_for=None, elapsed=200.0),
            Done(False, 1, failures={"prefill": "pair prefill → decode failed"}, elapsed=201.0)]


def test_drains_are_kept_with_how_long_each_took_and_what_was_cut(tmp_path):
    path = tmp_path / "h.sqlite3"
    record(path, a_drained_restart())
    [run] = load_runs(connect(path, create=False))
    assert run.drains == a_drained_restart()[1:3]
    line = history_line(run)
    assert "decode drained, back after 1m14s (idle after 1.2s, none cut)" in line
    assert "prefill drained, left out (idle after 2m00s, 3 cut)" in line
    report = report_text(run).splitlines()
    drains = report.index("drains:")
    assert report[drains + 1:drains + 3] == [
        "    @  1m15s  decode out of router: drained, back after 1m14s (idle after 1.2s, none cut)",
        "    @  3m20s  prefill out of router: drained, left out (idle after 2m00s, 3 cut)"]


def test_a_runs_json_holds_its_drains(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    record(history_path({"XDG_STATE_HOME": str(tmp_path)}), a_drained_restart())
    code, out, _ = run_cli(monkeypatch, capsys, "report", "--json")
    assert code == 0
    assert json.loads(out)["drains"][0] == {"service": "decode", "routers": ["router"], "outcome": "back",
                                            "idle_after": 1.25, "cut": 0, "out_for": 74.0, "elapsed": 75.0}


def test_a_hostile_failure_reason_is_inert_in_every_face_of_the_history(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    reason = "OOM \x1b]52;c;cHduZWQ=\x07 \x7f \u061c \u202e \x9b31m"
    failed = [e for e in a_bring_up() if not (isinstance(e, StateChanged) and e.service == "decode"
                                              and e.new is S.READY)]
    record(history_path({"XDG_STATE_HOME": str(tmp_path)}),
           [*failed[:-1], StateChanged("decode", S.WAITING, S.FAILED, reason, elapsed=50.0),
            Done(False, 1, {}, {"decode": reason}, elapsed=50.0)])
    for argv in (["history"], ["history", "--json"], ["report"], ["report", "--json"]):
        code, out, _ = run_cli(monkeypatch, capsys, *argv)
        assert code == 0 and ("OOM" in out or argv == ["history"])      # the plain list names no reason
        assert not [c for c in out if c != "\n" and (not c.isprintable())], argv
    code, out, _ = run_cli(monkeypatch, capsys, "report", "--json")
    assert json.loads(out)["services"]["decode"]["reason"] == reason     # the same data to a parser


def test_a_state_folder_whose_name_holds_escapes_is_named_inert(tmp_path, monkeypatch, capsys):
    """XDG_STATE_HOME is the caller's environment, and its name reaches the terminal in every line that names the
    history: an OSC title write or a bell in it is shown, never acted on."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "x\x1b]0;TITLE\x07"))
    for command in ("history", "report"):
        code, _, err = run_cli(monkeypatch, capsys, command)
        assert code == 1 and "no run history yet" in err, err
        assert "\x1b" not in err and "\x07" not in err, err
