"""The SGLang-like worker: startup order, /health 503 -> 200, the HTTP API, every failure mode."""

from __future__ import annotations

import json
import re
import signal
import subprocess

import pytest

from tests.conftest_sim import (  # noqa: F401
    Procs,
    fetch,
    free_port,
    package_env,
    read_until,
    status,
    without_bar,
    worker_process_argv,
)

SERVING = ["max_total_num_tokens=", "Started server process", "Waiting for application startup",
           "Application startup complete", "Uvicorn running on http://127.0.0.1:", 'model_info HTTP/1.1" 200']
# Each generation's start-up, in order, as SGLang's own source of those releases prints it.
STARTUP_ORDER = {
    "older": ["Init torch distributed ends", "Load weight begin", "Load weight end", "KV Cache is allocated",
              "Memory pool end", "Capture cuda graph begin. This can take up to several minutes.",
              "Capture cuda graph end. Time elapsed:", *SERVING, "Start of prefill warmup ...",
              '"POST /generate HTTP/1.1" 200', "End of prefill warmup with status 200, resp:",
              "The server is fired up and ready to roll!"],
    "2025": ["Init torch distributed ends", "Load weight begin", "Load weight end", "KV Cache is allocated",
             "Memory pool end", "Capture cuda graph begin. This can take up to several minutes.",
             "Capture cuda graph end. Time elapsed:", *SERVING, "Start of pd disaggregation warmup ...",
             '"POST /generate HTTP/1.1" 200', "End of prefill disaggregation mode warmup with status 200",
             "The server is fired up and ready to roll!"],
    # As a real 0.5.23 printed it (tests/integration/test_real_sglang.py), and the CUDA graph lines of a GPU's.
    "current": ["server_args={'model_path': ", "CommonKVBootstrapServer started successfully", "Init parallel begin.",
                "Init parallel ends.", "Memory baseline taken.", "Load weight begin", "Load weight end",
                "KV Cache is allocated", "Memory pool end", "Capture decode CUDA graph begin. backend=",
                "Capture decode CUDA graph end. elapsed=", "max_total_num_tokens=", "Engine startup timings (s):",
                *SERVING[1:],
                "Start of pd disaggregation warmup ...", '"POST /generate HTTP/1.1" 200',
                "Disaggregation warmup requests completed for all 1 DP ranks", "End of disaggregation warmup",
                "The server is fired up and ready to roll!"],
}
WARMUP_FAILED = {
    "older": "End of prefill warmup with status 400, resp:",
    "2025": "Prefill disaggregation mode warm Up Failed, status code: 400",
    "current": "Disaggregation warmup failed (mode=prefill), status codes: [400]",
}
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( TP0)?\] ")


@pytest.mark.parametrize("generation", STARTUP_ORDER)
def test_startup_prints_each_generations_sequence_in_order_with_timestamps(procs: Procs, generation):
    worker = procs.start(worker_process_argv("prefill", free_port(), "--generation", generation, startup=0.3))
    lines = read_until(worker, "fired up and ready")
    positions = [next(i for i, line in enumerate(lines) if step in line) for step in STARTUP_ORDER[generation]]
    assert positions == sorted(positions)
    assert all(STAMP.match(line) for line in lines)
    args = "server_args={'" if generation == "current" else "server_args=ServerArgs("
    assert lines[0].split("] ", 1)[1].startswith(args) and len(lines[0]) > 4096
    assert (" TP0] " in lines[2]) == (generation != "current")     # 0.5.23: a rank prefix only beyond one rank
    assert any("Init torch distributed" in line for line in lines) == (generation != "current")


def test_0_5_23_prefixes_its_schedulers_lines_with_the_rank_once_there_are_several(procs: Procs):
    worker = procs.start(worker_process_argv("decode", free_port(), "--tp", "4", startup=0.3))
    assert " TP0] Init parallel begin." in next(line for line in read_until(worker, "Init parallel") if "Init" in line)


def test_oldest_health_answers_200_before_the_warm_up(procs: Procs):
    port = free_port()
    worker = procs.start(worker_process_argv("decode", port, "--generation", "older", startup=2.5))
    read_until(worker, "Uvicorn running")
    assert status(f"http://127.0.0.1:{port}/health") == 200
    assert "fired up" not in "".join(read_until(worker, "GET /health HTTP/1.1"))


def test_health_is_503_while_warming_up_and_200_once_ready(procs: Procs):
    port = free_port()
    worker = procs.start(worker_process_argv("prefill", port, startup=2.5))
    read_until(worker, "Uvicorn running")
    assert status(f"http://127.0.0.1:{port}/get_model_info") == 200   # uvicorn is up before ready
    assert status(f"http://127.0.0.1:{port}/health") == 503
    assert status(f"http://127.0.0.1:{port}/ready") == 503
    lines = read_until(worker, "fired up and ready")
    assert any('"GET /health HTTP/1.1" 503 Service Unavailable' in line for line in lines)
    assert status(f"http://127.0.0.1:{port}/health") == 200
    assert status(f"http://127.0.0.1:{port}/ready") == 200
    assert status(f"http://127.0.0.1:{port}/health_generate") == 200
    assert '"GET /health HTTP/1.1" 200 OK' in read_until(worker, "GET /health HTTP/1.1")[-1]
    assert procs.stop(worker) == 0


def ready_worker(procs: Procs, role: str, *extra: str) -> tuple[object, str]:
    port = free_port()
    worker = procs.start(worker_process_argv(role, port, *extra, startup=0.2))
    read_until(worker, "fired up and ready")
    return worker, f"http://127.0.0.1:{port}"


def test_info_endpoints_describe_a_pd_worker(procs: Procs):
    _, url = ready_worker(procs, "prefill", "--bootstrap-port", "9123", "--gpus", "0,1,2,3", "--model", "m/x")
    for path in ("/get_server_info", "/server_info"):
        code, body = fetch(url + path)
        info = json.loads(body)
        assert code == 200 and info["disaggregation_mode"] == "prefill"
        assert info["disaggregation_bootstrap_port"] == 9123 and info["tp_size"] == 4 and info["dp_size"] == 1
    for path in ("/get_model_info", "/model_info"):
        assert json.loads(fetch(url + path)[1])["model_path"] == "m/x"
    assert json.loads(fetch(url + "/v1/models")[1])["data"][0]["id"] == "m/x"


def test_decode_answers_generation_requests(procs: Procs):
    _, url = ready_worker(procs, "decode")
    code, body = fetch(url + "/v1/chat/completions", "POST",
                         {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    answer = json.loads(body)
    assert code == 200 and answer["object"] == "chat.completion"
    assert len(answer["choices"][0]["message"]["content"].split()) == 4 and answer["usage"]["completion_tokens"] == 4
    code, body = fetch(url + "/generate", "POST", {"text": "hi", "sampling_params": {"max_new_tokens": 3}})
    assert code == 200 and len(json.loads(body)["text"].split()) == 3
    code, body = fetch(url + "/v1/completions", "POST", {"model": "m", "prompt": "hi", "max_tokens": 2})
    assert code == 200 and json.loads(body)["choices"][0]["text"]


def test_prefill_wants_bootstrap_fields(procs: Procs):
    _, url = ready_worker(procs, "prefill")
    plain = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
    assert fetch(url + "/generate", "POST", plain)[0] == 400
    pd = {**plain, "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 7}
    assert fetch(url + "/generate", "POST", pd)[0] == 200


def test_rejected_http2_preface_is_logged_like_uvicorn(procs: Procs):
    import socket
    worker, url = ready_worker(procs, "decode")
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        sock.recv(1024)
    assert read_until(worker, "Invalid HTTP request")[-1].endswith("WARNING:  Invalid HTTP request received.")


def test_steady_state_batch_lines_come_after_ready(procs: Procs):
    worker, _ = ready_worker(procs, "decode", "--log-rate", "200")
    lines = [read_until(worker, "Decode batch")[-1] for _ in range(50)]
    assert all(" TP0] Decode batch, #running-req: " in line and "gen throughput (token/s)" in line for line in lines)


def test_the_weight_loader_draws_its_bar_redrawn_by_carriage_returns_as_sglang_does():
    worker = subprocess.run(worker_process_argv("decode", free_port(), "--fail", "oom", startup=0.2),
                            capture_output=True, timeout=30, env=package_env())     # bytes: every \r as it is
    assert worker.stderr.split(b"\n")[0] == (b"\rMulti-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]"
                                   b"\rMulti-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 1296.14it/s]")


def finished(procs: Procs, role: str, mode: str) -> tuple[int, str, str]:
    worker = procs.start(worker_process_argv(role, free_port(), "--fail", mode, startup=0.2))
    out, err = worker.communicate(timeout=30)
    return worker.returncode, out, err


@pytest.mark.parametrize("mode, last_error", [
    ("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
    ("nccl", "RuntimeError: NCCL error: unhandled system error"),
    ("mooncake", "RuntimeError: Mooncake memory registration failed."),
])
def test_crash_during_startup_prints_traceback_and_exits_1(procs: Procs, mode, last_error):
    code, out, err = finished(procs, "decode", mode)
    assert code == 1
    assert "fired up" not in out and "Uvicorn running" not in out
    err_lines = without_bar(err)
    assert "Scheduler hit an exception: Traceback (most recent call last):" in err_lines[0]
    assert any(line.startswith(last_error) for line in err_lines)
    assert "Received sigquit from a child process." in err_lines[-1]
    if mode == "oom":
        assert "Capture decode CUDA graph begin" in out.splitlines()[-1]


def test_fake_on_a_prefill_is_refused_before_anything_starts_as_0_5_23_refuses_it(procs: Procs):
    worker = procs.start(worker_process_argv("prefill", free_port(), "--disaggregation-transfer-backend", "fake"))
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 1 and "server_args" not in out and "kill_process_tree called" in out
    assert err.splitlines()[-1] == "AssertionError: Prefill server does not support 'fake' as the transfer backend"


def test_port_in_use_prints_uvicorn_bind_error_and_an_older_release_exits(procs: Procs):
    worker = procs.start(worker_process_argv("prefill", free_port(), "--fail", "port-in-use", "--generation", "2025",
                                             startup=0.2))
    out, err = worker.communicate(timeout=30)
    assert worker.returncode == 1 and "Uvicorn running" not in out
    assert re.search(r"ERROR:    \[Errno 98\] error while attempting to bind on address \('127\.0\.0\.1', \d+\): "
                     r"address already in use", err)


def test_a_port_really_taken_is_said_and_0_5_23_then_hangs_as_the_real_one_does(procs: Procs):
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        worker = procs.start(worker_process_argv("decode", sock.getsockname()[1], startup=0.2))
        assert worker.stderr is not None
        assert "[Errno 98] error while attempting to bind on address" in next(without_bar(worker.stderr))
        assert "Waiting for application shutdown." in read_until(worker, "Waiting for application shutdown.")[-1]
        with pytest.raises(subprocess.TimeoutExpired):
            worker.wait(timeout=1.0)
    assert procs.stop(worker) == 0


def test_crash_after_ready(procs: Procs):
    code, out, err = finished(procs, "decode", "crash-after-ready")
    assert code == 1 and "The server is fired up and ready to roll!" in out
    assert "Scheduler hit an exception" in err and "Received sigquit" in err


@pytest.mark.parametrize("generation", WARMUP_FAILED)
def test_a_failed_warm_up_prints_the_ready_line_and_health_answers_200(procs: Procs, generation):
    port = free_port()
    worker = procs.start(worker_process_argv("prefill", port, "--fail", "warmup-failed", "--generation", generation,
                                     startup=0.2))
    lines = read_until(worker, "fired up and ready")
    assert WARMUP_FAILED[generation] in lines[-2]
    assert status(f"http://127.0.0.1:{port}/health") == 200   # as SGLang: only the failure line tells
    assert status(f"http://127.0.0.1:{port}/ready") == (503 if generation == "current" else 404)   # UnHealthy
    assert worker.poll() is None
    assert procs.stop(worker) == 0


def test_hang_stops_logging_after_cuda_graph_capture_and_exits_on_sigterm(procs: Procs):
    port = free_port()
    worker = procs.start(worker_process_argv("decode", port, "--fail", "hang", startup=0.2))
    read_until(worker, "Capture decode CUDA graph begin")
    assert status(f"http://127.0.0.1:{port}/health") == 0   # never got as far as binding
    assert procs.stop(worker, signal.SIGTERM) == 0
    assert worker.stdout.read() == ""


def test_generate_500_is_ready_but_fails_generation(procs: Procs):
    _, url = ready_worker(procs, "decode", "--fail", "generate-500")
    assert status(url + "/health") == 200
    code, body = fetch(url + "/v1/chat/completions", "POST", {"messages": [{"role": "user", "content": "x"}]})
    assert code == 500 and json.loads(body)["code"] == 500


def test_sigterm_after_ready_shuts_down_cleanly(procs: Procs):
    worker, _ = ready_worker(procs, "decode")
    assert procs.stop(worker) == 0
    assert "Finished server process" in worker.stdout.read()


def test_streamed_chat_sends_one_event_per_token_then_done(procs: Procs):
    _, url = ready_worker(procs, "decode")
    code, body = fetch(url + "/v1/chat/completions", "POST",
                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True})
    events = [line.removeprefix("data: ") for line in body.decode().split("\n\n") if line]
    assert code == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks) == "The quick brown"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_prefill_runs_its_bootstrap_server_and_says_so(procs: Procs):
    boot = free_port()
    worker, _ = ready_worker(procs, "prefill", "--bootstrap-port", str(boot))
    assert status(f"http://127.0.0.1:{boot}/route") == 200
    assert procs.stop(worker) == 0


def test_a_taken_bootstrap_port_logs_server_error_and_the_server_goes_on(procs: Procs):
    boot, port = free_port(), free_port()
    worker = procs.start(worker_process_argv("prefill", port, "--bootstrap-port", str(boot), "--fail",
                                     "bootstrap-port-in-use", startup=0.2))
    read_until(worker, "fired up and ready")
    assert status(f"http://127.0.0.1:{port}/health") == 200
    assert status(f"http://127.0.0.1:{boot}/route") == 0     # held by a process that is no bootstrap server
    procs.stop(worker)
    err = worker.stderr.read()
    # As a real 0.5.23 said it: its main process (no rank prefix) runs the bootstrap server.
    assert re.search(rf"\d\] Server error: \[Errno 98\] error while attempting to bind on address \('127\.0\.0\.1', "
                     rf"{boot}\): address already in use", err)


def test_a_request_traceback_after_ready_leaves_the_server_serving(procs: Procs):
    port = free_port()
    worker = procs.start(worker_process_argv("decode", port, "--fail", "request-traceback", startup=0.2))
    read_until(worker, "fired up and ready")
    read_until(worker, "Decode batch")   # the first comes 2 s after ready, the traceback 1 s after
    assert worker.poll() is None and status(f"http://127.0.0.1:{port}/health") == 200
    procs.stop(worker)
    err = without_bar(worker.stderr.read())
    assert "ERROR:    Exception in ASGI application" in err[0] and err[1] == "Traceback (most recent call last):"


def test_transfer_errors_fail_each_routed_request_and_are_logged(procs: Procs):
    worker, url = ready_worker(procs, "decode", "--fail", "transfer-errors")
    routed = {"text": "x", "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 7}
    code, body = fetch(url + "/generate", "POST", routed)
    assert code == 500 and json.loads(body)["message"].startswith("Decode transfer failed for request rank=0")
    procs.stop(worker)
    assert "Decode transfer failed for request rank=0" in worker.stderr.read()


def test_a_killed_scheduler_is_said_then_0_5_23_kills_its_whole_tree_itself_last(procs: Procs):
    worker = procs.start(worker_process_argv("decode", free_port(), "--fail", "scheduler-killed", startup=0.2))
    out, _ = worker.communicate(timeout=30)
    assert worker.returncode == -signal.SIGKILL
    assert re.search(r"Subprocess scheduler_0 \(pid=\d+\) crashed with exit code -9\. Triggering SIGQUIT for cleanup",
                     out)
    assert out.splitlines()[-1].endswith(f"kill_process_tree called: parent_pid={worker.pid}, include_parent=True, "
                                         f"pid={worker.pid}")


def test_a_small_kv_pool_is_warned_about_and_a_decode_then_waits_in_its_warm_up(procs: Procs):
    worker = procs.start(worker_process_argv("decode", free_port(), "--fail", "small-kv-pool", startup=0.2))
    lines = read_until(worker, "Start of pd disaggregation warmup")
    assert any("KV pool holds 64 tokens, fewer than --context-length" in line for line in lines)
    with pytest.raises(subprocess.TimeoutExpired):
        worker.wait(timeout=1.0)
    assert procs.stop(worker) == 0


def wide_ranks(procs: Procs, *extra: str) -> tuple[subprocess.Popen[str], subprocess.Popen[str], int, int]:
    """Rank 0 and rank 1 of one simulated decode over two nodes (this machine twice), started side by side."""
    ports, dist = (free_port(), free_port()), f"127.0.0.1:{free_port()}"
    ranks = [procs.start(worker_process_argv("decode", ports[rank], "--tp", "2", "--nnodes", "2", "--node-rank",
                                             str(rank), "--dist-init-addr", dist, *extra, startup=0.3))
             for rank in (0, 1)]
    return ranks[0], ranks[1], ports[0], ports[1]


def test_a_rank_above_0_serves_only_a_dummy_health_once_the_ranks_met(procs: Procs):
    rank0, rank1, port0, port1 = wide_ranks(procs)
    lines = read_until(rank1, "Dummy health check server started in background thread at 127.0.0.1:")
    assert any(" TP1] Init parallel ends." in line for line in lines)
    assert not any("fired up and ready" in line or "Uvicorn running" in line for line in lines)
    assert status(f"http://127.0.0.1:{port1}/health") == 200 and status(f"http://127.0.0.1:{port1}/ping") == 200
    assert status(f"http://127.0.0.1:{port1}/server_info") == 404      # no API of its own
    read_until(rank0, "fired up and ready")
    assert status(f"http://127.0.0.1:{port0}/server_info") == 200


def test_rank_0_ending_ends_the_others_and_a_rank_dying_takes_the_others_down(procs: Procs):
    rank0, rank1, _, _ = wide_ranks(procs)
    read_until(rank1, "Dummy health check server started")
    read_until(rank0, "fired up and ready")
    assert procs.stop(rank0) == 0
    assert rank1.wait(10) == 0          # rank 0's shutdown told it to end
    rank0, rank1, _, _ = wide_ranks(procs, "--fail", "crash-after-ready", "--fail-rank", "1")
    read_until(rank1, "Dummy health check server started")
    assert rank1.wait(10) == 1
    assert rank0.wait(10) == 1
    assert "Connection closed by peer [127.0.0.1:" in rank0.stderr.read()


def test_a_rank_that_cannot_reach_rank_0_says_so_as_it_retries(procs: Procs):
    rank1 = procs.start(worker_process_argv("decode", free_port(), "--nnodes", "2", "--node-rank", "1",
                                            "--dist-init-addr", f"127.0.0.1:{free_port()}", startup=0.3),
                        stderr=subprocess.DEVNULL)
    lines = read_until(rank1, "[c10d] TCP client failed to connect/validate to host 127.0.0.1:")
    assert " - retrying (try=" in lines[-1] and not any("Init parallel ends" in line for line in lines)
