"""What the faces say of a Slurm job: the JSON lines (state events carry job_id and node; kind job), the headless
lines, status --once's table and object, and the run history's invocation."""

from __future__ import annotations

import io
import json
from pathlib import Path

from pdtui.engine.events import Done, JobStatus, PlanReady, ServiceInfo, StateChanged, Step
from pdtui.engine.states import ServiceState as S
from pdtui.faces.headless import LinePrinter, to_json
from pdtui.faces.run_history import HistoryRecorder, connect, load_runs
from pdtui.faces.status_table import StatusBoard

DECODE = ServiceInfo("decode", "decode", "pd-decode", "hpc", (), None, 30002, (), 360.0, job=True)
PLAN = PlanReady("pd", (DECODE,), tuple(Step))
RUNNING = JobStatus("decode", "12", "RUNNING", "", "gpu07", (4, 5, 6, 7), elapsed=3.0)


def test_state_events_carry_the_job_id_and_node() -> None:
    event = json.loads(to_json(StateChanged("decode", S.QUEUED, S.WAITING, "started", elapsed=3.0, job_id="12",
                                            node="gpu07")))
    assert (event["kind"], event["state"], event["job_id"], event["node"]) == ("state", "waiting", "12", "gpu07")
    unit = json.loads(to_json(StateChanged("prefill", S.PENDING, S.STARTING)))
    assert (unit["job_id"], unit["node"]) == (None, None)


def test_a_job_event_is_kind_job_with_slurms_words() -> None:
    event = json.loads(to_json(RUNNING))
    assert event == {"kind": "job", "service": "decode", "job_id": "12", "state": "RUNNING", "reason": "",
                     "node": "gpu07", "gpus": [4, 5, 6, 7], "exit_code": "", "nodes": [], "elapsed": 3.0}


def test_headless_names_the_cluster_and_tells_a_queued_jobs_new_reason_once() -> None:
    out = io.StringIO()
    printer = LinePrinter(out)
    for event in (PLAN, JobStatus("decode", "12", "PENDING", "Priority", elapsed=0.1),
                  JobStatus("decode", "12", "PENDING", "Priority", elapsed=0.6),
                  JobStatus("decode", "12", "PENDING", "Resources", elapsed=1.1), RUNNING):
        printer(event)
    assert out.getvalue().splitlines() == ["[    0.0s] bring-up pd: 1 services on 1 Slurm cluster",
                                           "[    1.1s] decode     job 12 PENDING: Resources"]


def test_status_once_shows_the_job_its_node_and_gpus() -> None:
    board = StatusBoard()
    for event in (PLAN, RUNNING, StateChanged("decode", S.WAITING, S.READY, "all checks hold", elapsed=4.0),
                  Done(True, 0, elapsed=4.0)):
        board(event)
    row = board.table().splitlines()[1].split()
    assert row[:7] == ["decode", "READY", "job", "12", "RUNNING", "-", "hpc:gpu07"] and row[7] == "4-7"
    service = json.loads(board.as_json())["services"][0]
    assert service["job"] == {"id": "12", "state": "RUNNING", "reason": "", "node": "gpu07", "exit_code": None}
    assert service["gpus"] == [4, 5, 6, 7] and service["unit"] == "pd-decode"


def test_the_history_keeps_a_jobs_id_as_its_invocation(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    recorder = HistoryRecorder(path)
    for event in (PLAN, StateChanged("decode", S.PENDING, S.STARTING, elapsed=0.1), RUNNING,
                  StateChanged("decode", S.STARTING, S.WAITING, elapsed=3.0),
                  StateChanged("decode", S.WAITING, S.READY, elapsed=4.0, time_to_ready=1.0), Done(True, 0, elapsed=4.0)):
        recorder(event)
    [run] = load_runs(connect(path, create=False))
    assert run.services["decode"].invocation == "12"
