"""The headless printers' contract beyond the lines themselves."""

from __future__ import annotations

import dataclasses
import json

from pdtui.engine.events import Done, Notice
from pdtui.faces.headless import UntilDone
from pdtui.gpus.sampler import GpuSample


def test_nothing_is_printed_after_the_done():
    printed: list = []
    gate = UntilDone(printed.append)
    events = [Notice("info", "before"), Done(ok=True, exit_code=0), GpuSample("gpu0", ()), Notice("info", "after")]
    for event in events:
        gate(event)
    assert printed == events[:2]


def test_a_canary_is_one_line_headless_and_a_canary_object_in_json():
    from pdtui.engine.events import CanaryResult, StateChanged
    from pdtui.engine.states import ServiceState
    from pdtui.faces.headless import LinePrinter, to_json
    failed = CanaryResult("router", False, "HTTP 500: \x1b[2Jno output", 0.012, 40.0)
    assert LinePrinter().format(failed) == "[   40.0s] router     canary: failed: HTTP 500: ␛[2Jno output [12 ms]"
    assert json.loads(to_json(failed)) == {"kind": "canary", "service": "router", "ok": False,
                                           "detail": "HTTP 500: \x1b[2Jno output", "latency": 0.012, "elapsed": 40.0}
    degraded = StateChanged("router", ServiceState.READY, ServiceState.DEGRADED, "canary failed: HTTP 500", elapsed=40.0)
    assert json.loads(to_json(degraded))["state"] == "degraded"
    assert "DEGRADED" in LinePrinter().format(degraded)


def test_a_failed_outcome_names_what_failed_and_apart_what_was_not_decided_yet():
    from pdtui.faces.headless import LinePrinter, to_json
    done = Done(False, 1, {}, {"decode": "CUDA out of memory"}, (), 38.0, waiting=("prefill",),
                blocked={"router": "decode failed"})
    text = LinePrinter().format(done)
    assert "decode: CUDA out of memory" in text and "router: not started (decode failed)" in text
    assert "not decided yet: prefill" in text and "prefill:" not in text
    data = json.loads(to_json(done))
    assert data["failures"] == {"decode": "CUDA out of memory"}
    assert data["blocked"] == {"router": "decode failed"}
    assert data["waiting"] == ["prefill"]


def test_a_ranks_notice_that_names_its_server_and_node_is_not_named_again():
    from pdtui.engine.events import ServerFailed
    from pdtui.faces.headless import LinePrinter, to_json
    told = Notice("warning", "decode: rank 1 on gpu-b: no line for 4m in distributed init", "decode@1", 243.0)
    assert LinePrinter().format(told) == "[  243.0s] warning: decode: rank 1 on gpu-b: no line for 4m in distributed init"
    assert LinePrinter().format(Notice("info", "cleared", "decode@1", 1.0)) == "[    1.0s] info: decode@1: cleared"
    assert json.loads(to_json(ServerFailed("decode", "decode@1", 38.5))) == {
        "kind": "server_failed", "service": "decode", "cause": "decode@1", "elapsed": 38.5}


def test_the_first_line_and_the_first_json_object_name_the_config_file_inert():
    from pdtui.faces.headless import LinePrinter, to_json
    from pdtui.faces.status_table import StatusBoard
    from pdtui.sim.scripted import PLAN
    plan = dataclasses.replace(PLAN, config="/srv/pd\x1b]52;c;eA==\x07.yaml")
    assert LinePrinter().format(plan) == ("[    0.0s] bring-up dsv4-flash-pd: 3 services on 1 host "
                                          "(config /srv/pd␛]52;c;eA==␇.yaml)")
    assert json.loads(to_json(plan))["config"] == plan.config and "\x1b" not in to_json(plan)
    board = StatusBoard()
    board(plan)
    assert board.table().splitlines()[0] == "config /srv/pd␛]52;c;eA==␇.yaml"
    assert json.loads(board.as_json())["config"] == plan.config


def test_a_failure_after_ready_says_when_the_deployment_was_ready_and_when_it_failed_in_lines_and_json():
    from pdtui.faces.headless import LinePrinter, to_json
    from pdtui.sim.scripted import failed_after_ready_script
    first, second = [event for event in failed_after_ready_script() if isinstance(event, Done)]
    printer = LinePrinter()
    assert printer.format(first).startswith("[   59.0s] ✓ all ready in 59.0s")
    assert printer.format(second).splitlines()[:2] == [
        "[  226.4s] ✗ ready at 59.0s · failed 167.0s later, at 226.0s",
        "           decode: after ready: scheduler crashed (TP0): RuntimeError: NCCL communicator was aborted on rank 0."]
    told = [json.loads(to_json(done)) for done in (first, second)]
    assert [(d["ok"], d["ready_at"], d["failed_at"], d["elapsed"]) for d in told] == [
        (True, 59.0, None, 59.0), (False, 59.0, 226.0, 226.4)]
    assert LinePrinter().format(dataclasses.replace(second, ready_at=None, failed_at=None)).splitlines()[0] \
        == "[  226.4s] ✗ bring-up failed", "never ready: the bring-up failed"


def test_status_once_says_when_the_deployment_was_ready_and_when_it_failed():
    from pdtui.faces.status_table import StatusBoard
    from pdtui.sim.scripted import failed_after_ready_script
    board = StatusBoard()
    for event in failed_after_ready_script():
        board(event)
    assert board.table().splitlines()[-1] == "dsv4-flash-pd: 2 of 3 ready (ready at 0:59 · failed 2:47 later, at 3:46)"
    told = json.loads(board.as_json())
    assert (told["ok"], told["ready_at"], told["failed_at"]) == (False, 59.0, 226.0)


def test_a_lone_surrogate_a_file_name_carried_is_one_json_line_with_its_code_escaped():
    from pdtui.faces.headless import to_json
    line = to_json(Notice("warning", "config not utf-8 \udcff.yaml", elapsed=1.0))
    assert "\\udcff" in line and json.loads(line)["text"] == "config not utf-8 \udcff.yaml"
