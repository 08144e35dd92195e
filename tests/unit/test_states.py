import itertools

import pytest

from pdtui.engine.states import ALLOWED, IllegalTransition, ServiceState, check_transition

ALL_PAIRS = list(itertools.product(ServiceState, ServiceState))
LEGAL = [(a, b) for a, b in ALL_PAIRS if b in ALLOWED[a]]
ILLEGAL = [(a, b) for a, b in ALL_PAIRS if b not in ALLOWED[a]]


@pytest.mark.parametrize("old,new", LEGAL, ids=lambda s: s.value)
def test_allowed_transition_passes(old, new):
    check_transition("svc", old, new)


@pytest.mark.parametrize("old,new", ILLEGAL, ids=lambda s: s.value)
def test_illegal_transition_is_rejected(old, new):
    with pytest.raises(IllegalTransition, match=f"svc: {old.value} -> {new.value}"):
        check_transition("svc", old, new)


def test_every_state_has_a_row():
    assert set(ALLOWED) == set(ServiceState)


def test_a_blocked_service_can_never_become_ready_directly():
    assert ServiceState.READY not in ALLOWED[ServiceState.BLOCKED]


def test_final_states():
    assert {s for s in ServiceState if s.is_final} == {
        ServiceState.READY, ServiceState.DEGRADED, ServiceState.FAILED, ServiceState.TIMED_OUT, ServiceState.BLOCKED,
        ServiceState.STOPPED}


def test_a_stopping_service_ends_stopped_or_failed_only():
    assert ALLOWED[ServiceState.STOPPING] == {ServiceState.STOPPED, ServiceState.FAILED}


def test_a_ready_service_can_be_restarted_or_stopped_but_never_starts_directly():
    assert ServiceState.PENDING in ALLOWED[ServiceState.READY]
    assert ServiceState.STOPPING in ALLOWED[ServiceState.READY]
    assert ServiceState.STARTING not in ALLOWED[ServiceState.READY]


def test_a_queued_job_runs_fails_times_out_or_is_sent_back_and_never_is_ready_at_once():
    assert ALLOWED[ServiceState.QUEUED] == {ServiceState.WAITING, ServiceState.FAILED, ServiceState.TIMED_OUT,
                                            ServiceState.PENDING, ServiceState.STOPPING}
    assert ServiceState.QUEUED in ALLOWED[ServiceState.STARTING] and not ServiceState.QUEUED.is_final


def test_only_a_ready_service_degrades_and_a_degraded_one_goes_back_to_ready_fails_or_settles():
    assert {old for old in ServiceState if ServiceState.DEGRADED in ALLOWED[old]} == {ServiceState.READY}
    assert ALLOWED[ServiceState.DEGRADED] == {ServiceState.READY, ServiceState.FAILED, ServiceState.PENDING,
                                              ServiceState.STOPPING}
