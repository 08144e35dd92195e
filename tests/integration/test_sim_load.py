"""The load generator as the demo runs it: it outlasts a router that is not up yet, sends once it is, stops cleanly."""

from __future__ import annotations

import signal
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pdtui.sim.command_lines import router_argv
from pdtui.sim.knobs import DEFAULT_MODEL
from tests.conftest_sim import Procs, fetch, free_port, read_until, wait_until, worker_process_argv  # noqa: F401


def load_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "pdtui.sim.load", "--url", f"http://127.0.0.1:{port}", "--model", DEFAULT_MODEL,
            "--rate", "4", "--concurrency", "2"]


def requests_served(port: int) -> float:
    code, body = fetch(f"http://127.0.0.1:{port}/metrics")
    if code != 200:
        return 0.0
    return next(s.value for family in text_string_to_metric_families(body.decode()) for s in family.samples
                if s.name == "sglang:num_requests_total")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_load_waits_out_a_router_that_is_down_sends_once_it_is_up_and_stops_cleanly(procs: Procs, sig):
    prefill, decode, router, boot = free_port(), free_port(), free_port(), free_port()
    load = procs.start(load_argv(router))
    read_until(load, "trying again")          # nothing listens yet
    assert load.poll() is None
    for role, port in (("prefill", prefill), ("decode", decode)):
        procs.start(worker_process_argv(role, port, "--bootstrap-port", str(boot), "--enable-metrics", startup=1.0))
    procs.start(router_argv(router, [(prefill, boot)], [decode], package="sim"))
    read_until(load, "answers: sending")
    wait_until(lambda: requests_served(decode) > 0 and requests_served(prefill) > 0)
    assert load.poll() is None
    assert procs.stop(load, sig) == 0
    out, err = load.stdout.read(), load.stderr.read()
    assert err == "", err
    last = out.splitlines()[-1]
    assert " load: stopped: " in last and " 0 answered" not in last
