"""A sim decode asks each prefill's bootstrap server before it takes that prefill's requests, as SGLang's does: one it
cannot reach fails those requests as SGLang 0.5 fails a KV transfer (logged, counted, HTTP 500), and the decode
goes on serving the others. ``--unreachable-bootstrap`` and ``transfer-errors-later`` play the broken pairs."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest_sim import Procs, fetch, free_port, read_until, status, wait_until, without_bar, worker_process_argv

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def routed(bootstrap_port: int, room: int, host: str = "127.0.0.1") -> dict[str, object]:
    """A chat as a PD router sends it to the decode: with the prefill's bootstrap address and a room."""
    return {**CHAT, "bootstrap_host": host, "bootstrap_port": bootstrap_port, "bootstrap_room": room}


def ready(procs: Procs, role: str, *extra: str) -> tuple[object, str]:
    port = free_port()
    worker = procs.start(worker_process_argv(role, port, *extra, startup=0.2))
    read_until(worker, "fired up and ready")
    return worker, f"http://127.0.0.1:{port}"


def ready_prefill(procs: Procs, bootstrap: int) -> object:
    """A sim prefill whose bootstrap server listens on ``bootstrap``."""
    worker, _ = ready(procs, "prefill", "--bootstrap-port", str(bootstrap))
    return worker


def failed_transfers(url: str) -> float:
    code, body = fetch(url + "/metrics")
    assert code == 200, body
    return sum(s.value for family in text_string_to_metric_families(body.decode()) for s in family.samples
               if s.name == "sglang:num_transfer_failed_reqs_total")


def test_a_decode_asks_each_prefills_bootstrap_server_once_and_keeps_the_answer(procs: Procs):
    first, second = free_port(), free_port()
    prefill = ready_prefill(procs, first)
    ready_prefill(procs, second)
    decode, url = ready(procs, "decode")
    assert fetch(url + "/v1/chat/completions", "POST", routed(first, 1))[0] == 200
    assert fetch(url + "/v1/chat/completions", "POST", routed(second, 2))[0] == 200
    procs.stop(prefill)
    assert status(f"http://127.0.0.1:{first}/route") == 0, "the first prefill's bootstrap server is gone"
    code, body = fetch(url + "/v1/chat/completions", "POST", routed(first, 3))
    assert code == 200, "its parallel info was kept from the first request: not asked again"
    assert json.loads(body)["usage"]["completion_tokens"] == 2
    procs.stop(decode)
    assert "prefill parallel info" not in decode.stderr.read()


def test_a_request_from_an_unreachable_bootstrap_fails_logged_counted_and_answered_500(procs: Procs):
    nobody = free_port()
    decode, url = ready(procs, "decode", "--enable-metrics")
    code, body = fetch(url + "/v1/chat/completions", "POST", routed(nobody, 7))
    assert code == 500
    answer = json.loads(body)
    assert answer["object"] == "error" and answer["code"] == 500
    assert answer["message"].startswith("Decode transfer failed for request rank=0 decode_req.req.rid='")
    assert answer["message"].endswith(
        f" decode_req.req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): Could not fetch "
        f"prefill parallel info from bootstrap_addr: 127.0.0.1:{nobody}")
    assert failed_transfers(url) == 1
    assert decode.poll() is None and status(url + "/health") == 200, "a failed request is not the decode's end"
    ready_prefill(procs, nobody)
    assert fetch(url + "/v1/chat/completions", "POST", routed(nobody, 8))[0] == 200, "a failure is not kept"
    procs.stop(decode)
    err = decode.stderr.read().splitlines()
    fetching = [line for line in err if "Error fetching prefill parallel info from bootstrap: " in line]
    assert len(fetching) == 1 and fetching[0].endswith("[Errno 111] Connection refused'))")
    assert f"HTTPConnectionPool(host='127.0.0.1', port={nobody})" in fetching[0]
    failed = [line for line in err if "Decode transfer failed for request rank=0" in line]
    assert len(failed) == 1 and failed[0].split("] ", 1)[1] == answer["message"]
    assert err.index(fetching[0]) < err.index(failed[0])


def test_the_fake_bootstrap_host_of_health_generate_moves_no_kv_so_asks_nobody(procs: Procs):
    decode, url = ready(procs, "decode")
    assert fetch(url + "/generate", "POST", {"text": "hi", **routed(free_port(), 1, host="2.2.2.2")})[0] == 200
    procs.stop(decode)
    assert without_bar(decode.stderr.read()) == []


def test_unreachable_bootstrap_refuses_only_the_ports_it_names(procs: Procs):
    broken, fine = free_port(), free_port()
    ready_prefill(procs, broken)
    ready_prefill(procs, fine)
    decode, url = ready(procs, "decode", "--unreachable-bootstrap", str(broken))
    for room in (1, 2):
        code, body = fetch(url + "/v1/chat/completions", "POST", routed(broken, room))
        assert code == 500 and json.loads(body)["message"].endswith(f"bootstrap_addr: 127.0.0.1:{broken}")
    assert status(f"http://127.0.0.1:{broken}/route") == 200, "the prefill is up: only this decode cannot reach it"
    assert fetch(url + "/v1/chat/completions", "POST", routed(fine, 3))[0] == 200
    procs.stop(decode)
    err = decode.stderr.read()
    assert err.count("Error fetching prefill parallel info from bootstrap: ") == 2, "each request tries again"
    assert err.count("Decode transfer failed for request") == 2 and f"port={fine}" not in err


def test_a_bad_unreachable_bootstrap_is_a_usage_error(procs: Procs):
    worker = procs.start(worker_process_argv("decode", free_port(), "--unreachable-bootstrap", "8998,x"))
    assert worker.wait(10) == 2
    assert "expected PORT[,PORT...], got '8998,x'" in worker.stderr.read()


def test_transfer_errors_later_fail_routed_requests_for_a_while_once_serving(procs: Procs, bootstrap_server):
    decode, url = ready(procs, "decode", "--enable-metrics", "--fail", "transfer-errors-later",
                        "--fail-after", "0.3", "--fail-for", "1")
    rooms = iter(range(1, 10_000))

    def chat() -> int:
        return fetch(url + "/v1/chat/completions", "POST", routed(bootstrap_server, next(rooms)))[0]

    assert chat() == 200, "the first generation served opens the window; failures come later"
    wait_until(lambda: chat() == 500, interval=0.05)
    assert failed_transfers(url) >= 1
    wait_until(lambda: chat() == 200, interval=0.05)
    procs.stop(decode)
    assert "Decode transfer failed for request rank=0" in decode.stderr.read()
