from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from pdtui.engine.events import Step, StepStatus
from pdtui.engine.states import ServiceState as S
from pdtui.engine.steps import StepRecord, split, step_statuses

DONE, RUNNING, PENDING, FAILED, SKIPPED = (StepStatus.DONE, StepStatus.RUNNING, StepStatus.PENDING,
                                           StepStatus.FAILED, StepStatus.SKIPPED)


def service(state, started=False, router=False):
    return SimpleNamespace(state=state, under_way=started, cfg=SimpleNamespace(is_router=router))


def steps(prefill, decode, router, preflight=DONE):
    return step_statuses(preflight, [prefill, decode], [service(*router, router=True)])


def test_nothing_started_yet():
    got = steps(service(S.PENDING), service(S.PENDING), (S.PENDING,), preflight=RUNNING)
    assert got == {Step.PREFLIGHT: RUNNING, Step.START_BACKENDS: PENDING, Step.WAIT_READY: PENDING,
                   Step.START_ROUTER: PENDING, Step.PROBE_ROUTER: PENDING, Step.DONE: PENDING}


def test_backends_waiting():
    got = steps(service(S.WAITING, True), service(S.STARTING), (S.PENDING,))
    assert (got[Step.START_BACKENDS], got[Step.WAIT_READY]) == (RUNNING, RUNNING)
    got = steps(service(S.WAITING, True), service(S.WAITING, True), (S.PENDING,))
    assert (got[Step.START_BACKENDS], got[Step.WAIT_READY]) == (DONE, RUNNING)


def test_router_probing_then_all_ready():
    got = steps(service(S.READY, True), service(S.READY, True), (S.WAITING, True))
    assert (got[Step.WAIT_READY], got[Step.START_ROUTER], got[Step.PROBE_ROUTER]) == (DONE, DONE, RUNNING)
    got = steps(service(S.READY, True), service(S.READY, True), (S.READY, True))
    assert set(got.values()) == {DONE}


def test_a_failed_backend_fails_waiting_and_skips_the_router_steps():
    got = steps(service(S.WAITING, True), service(S.FAILED, True), (S.BLOCKED,))
    assert got[Step.WAIT_READY] is FAILED and got[Step.DONE] is FAILED
    assert (got[Step.START_ROUTER], got[Step.PROBE_ROUTER]) == (SKIPPED, SKIPPED)


def test_a_start_that_failed_fails_the_start_step():
    got = steps(service(S.FAILED), service(S.WAITING, True), (S.BLOCKED,))
    assert got[Step.START_BACKENDS] is FAILED


def test_a_refusal_before_anything_started_skips_every_step_after_the_preflight():
    """A drift refused on the decode: the decode failed, the rest blocked; no start was tried, so none failed."""
    got = steps(service(S.BLOCKED), service(S.FAILED), (S.BLOCKED,), preflight=FAILED)
    assert got == {Step.PREFLIGHT: FAILED, Step.START_BACKENDS: SKIPPED, Step.WAIT_READY: SKIPPED,
                   Step.START_ROUTER: SKIPPED, Step.PROBE_ROUTER: SKIPPED, Step.DONE: FAILED}


def test_a_router_that_timed_out_fails_the_probe():
    got = steps(service(S.READY, True), service(S.READY, True), (S.TIMED_OUT, True))
    assert got[Step.PROBE_ROUTER] is FAILED and got[Step.DONE] is FAILED


def _per_step(runs) -> dict:
    """The steps as a pass per step reads them off the services: what the one-pass tally must answer.

    A degraded router was proven ready: for the steps it counts as ready."""
    def proven(state):
        return S.READY if state is S.DEGRADED else state

    def start(group):
        states = {r.state for r in group}
        if not group or states == {S.BLOCKED}:
            return SKIPPED
        if S.STARTING in states or S.QUEUED in states:     # a job waiting for its place is still being started
            return RUNNING
        if any(r.state is S.FAILED and not r.under_way for r in group):
            return FAILED
        if all(r.under_way or r.state is S.BLOCKED for r in group):
            return DONE
        return RUNNING if any(r.under_way for r in group) else PENDING

    def wait(group):
        states = {proven(r.state) for r in group}
        if not group or states == {S.BLOCKED}:
            return SKIPPED
        if states & {S.FAILED, S.TIMED_OUT}:
            return FAILED
        if states == {S.READY}:
            return DONE
        return RUNNING if S.WAITING in states or S.READY in states else PENDING

    backends, routers = [r for r in runs if not r.cfg.is_router], [r for r in runs if r.cfg.is_router]
    states = [proven(r.state) for r in runs]
    done = (DONE if all(s is S.READY for s in states) else
            FAILED if any(s in (S.FAILED, S.TIMED_OUT) for s in states) else PENDING)
    return {Step.PREFLIGHT: DONE, Step.START_BACKENDS: start(backends), Step.WAIT_READY: wait(backends),
            Step.START_ROUTER: start(routers), Step.PROBE_ROUTER: wait(routers), Step.DONE: done}


@given(st.lists(st.tuples(st.sampled_from(list(S)), st.booleans(), st.booleans()), max_size=12))
def test_the_one_pass_tally_answers_as_a_pass_per_step(specs) -> None:
    runs = [service(state, started, router) for state, started, router in specs]
    assert step_statuses(DONE, *split(runs)) == _per_step(runs)


def test_a_degraded_router_keeps_the_bring_up_steps_done():
    got = steps(service(S.READY, True), service(S.READY, True), (S.DEGRADED, True))
    assert got[Step.PROBE_ROUTER] is DONE and got[Step.DONE] is DONE


def told(record: StepRecord, prefill, decode, router, at: float) -> dict:
    """The steps ``record`` tells when the services are as given, at ``at``: each step told, with its status."""
    return {change.step: change.status for change in record.update(steps(prefill, decode, router), at)}


def test_a_failure_after_ready_changes_no_step_and_is_dated_after_the_readiness():
    record = StepRecord()
    assert told(record, service(S.READY, True), service(S.READY, True), (S.READY, True), 94.0)[Step.DONE] is DONE
    assert (record.ready_at, record.failed_at) == (94.0, None)
    assert told(record, service(S.READY, True), service(S.FAILED, True), (S.READY, True), 226.0) == {}
    assert record.told == dict.fromkeys(Step, DONE)
    assert (record.ready_at, record.failed_at) == (94.0, 226.0)
    assert told(record, service(S.READY, True), service(S.FAILED, True), (S.DEGRADED, True), 240.0) == {}
    assert record.failed_at == 226.0, "since its first failure"


def test_a_retry_after_ready_is_told_as_a_new_attempt_whose_readiness_is_still_to_come():
    record = StepRecord()
    told(record, service(S.READY, True), service(S.READY, True), (S.READY, True), 94.0)
    told(record, service(S.READY, True), service(S.FAILED, True), (S.READY, True), 226.0)
    again = told(record, service(S.READY, True), service(S.PENDING), (S.READY, True), 300.0)
    assert (again[Step.WAIT_READY], again[Step.DONE]) == (RUNNING, PENDING)
    assert (record.ready_at, record.failed_at) == (None, None)
    assert told(record, service(S.READY, True), service(S.FAILED, True), (S.READY, True), 320.0)[Step.WAIT_READY] \
        is FAILED, "the retry failed before it was ready: its step did"
    assert (record.ready_at, record.failed_at) == (None, None)


def test_a_backend_failing_while_the_router_is_probed_keeps_its_wait_done_and_fails_the_bring_up():
    record = StepRecord()
    told(record, service(S.READY, True), service(S.READY, True), (S.WAITING, True), 50.0)
    now = told(record, service(S.READY, True), service(S.FAILED, True), (S.WAITING, True), 51.0)
    assert now == {Step.DONE: FAILED}
    assert (record.told[Step.WAIT_READY], record.told[Step.PROBE_ROUTER]) == (DONE, RUNNING)
    assert record.ready_at is None, "the deployment was never ready: no failure after ready"
