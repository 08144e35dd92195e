"""``python -m pdtui.sim.worker --role prefill|decode --port P ...``: an SGLang PD worker without a GPU.

It prints SGLang's real startup sequence in the wording of ``--generation``
(older, 2025, current: see sim/wording.py) spread over ``--startup`` seconds,
binds its HTTP port at "Uvicorn running" time (before it is ready, as the real
one does), answers ``/health`` as that generation does (503 while Starting and
200 once the warm-up ended, *failed or not*; always 200 on the oldest), runs a
prefill's bootstrap server, then logs steady-state batch lines at ``--log-rate``
whose figures are those of the requests it is serving (sim/serving.py), as
``/metrics`` does with ``--enable-metrics`` (sim/metrics.py). A decode asks each
prefill's bootstrap server before it takes that prefill's requests
(``--unreachable-bootstrap`` names the ports it cannot reach). ``--fail MODE``
plays one of the failures pdtui must recognise, or one of the lines that only
look bad (a request's traceback, per-request transfer errors) while it goes on
serving. Normal lines go to stdout, failure blocks to stderr; every line is
flushed at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from pdtui.sim.bootstrap import BootstrapServer, PrefillInfo
from pdtui.sim.httpserve import set_on_signal
from pdtui.sim.knobs import DEFAULT_MODEL, FAIL_AFTER, FAIL_FOR, FAIL_MODES
from pdtui.sim.rendezvous import Group
from pdtui.sim.serving import DEFAULT_CAPACITY, MAX_TOTAL_TOKENS, Load, Prefilled, Serving
from pdtui.sim.wording import DEFAULT_GENERATION, GENERATIONS, WORDINGS
from pdtui.sim.worker_http import FailWindow, WorkerServer, WorkerState

SGLANG = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
ANSWERS = {"reasoning-only": "reasoning", "empty-200": "empty"}   # fail modes that change what a generation answers
WARMUP_LOAD = Load(running=0, queued=0, used_tokens=0, token_usage=0.0, gen_throughput=0.0, cache_hit_rate=0.0,
                   utilization=0.0, prefill_bootstrap=0, prefill_inflight=1, decode_prealloc=0, decode_transfer=0)
SMALL_POOL = ("KV pool holds 64 tokens, fewer than --context-length 32768. One full-length request cannot fit, so long "
              "requests will be refused or truncated at serving time. Lower --context-length, raise "
              "--mem-fraction-static, or free memory taken before the pool is sized.")
FOLLOWER_STOP_WAIT = 5.0    # seconds a rank >= 1 stopped alone waits for rank 0's shutdown
STARTUP_TIMINGS = ("Engine startup timings (s): load_weight=28.12, kv_cache_allocation=1.87, scheduler_e2e=61.40, "
                   "cuda_graph={prefill=0.00, decode=14.92, target_verify=0.00, draft_prefill=0.00, draft_decode=0.00, "
                   "draft_extend=0.00}, tokenizer_e2e=66.83")


class Log:
    """SGLang's log format: ``[%Y-%m-%d %H:%M:%S TP0] message``; thread-safe, flushed per line.

    ``rank``: the scheduler's prefix (`` TP0``); 0.5.23 prints none for a server of one rank."""

    def __init__(self, rank: str = " TP0") -> None:
        self.lock = threading.Lock()
        self.rank = rank

    @staticmethod
    def stamp(prefix: str = "") -> str:
        return f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{prefix}]"

    def write(self, text: str, stream: TextIO | None = None) -> None:
        out = stream or sys.stdout
        with self.lock:
            out.write(text)
            out.flush()

    def main(self, message: str) -> None:
        """A line of the HTTP/tokenizer process (no rank prefix)."""
        self.write(f"{self.stamp()} {message}\n")

    def tp(self, message: str) -> None:
        """A line of the scheduler of rank TP0."""
        self.write(f"{self.stamp(self.rank)} {message}\n")

    def progress(self, label: str) -> None:
        """A tqdm bar as SGLang's weight loader draws it on stderr: each state redrawn over the last by a carriage
        return, one newline at its close, so the journal holds all of them in one line."""
        states = (f"{label}:   0% Completed | 0/1 [00:00<?, ?it/s]",
                  f"{label}: 100% Completed | 1/1 [00:00<00:00, 1296.14it/s]")
        self.write("".join(f"\r{state}" for state in states) + "\n", sys.stderr)

    def tp_error(self, message: str) -> None:
        """An error line of the scheduler of rank TP0, on stderr."""
        self.write(f"{self.stamp(self.rank)} {message}\n", sys.stderr)

    def error_block(self, lines: list[str], prefix: str | None = None) -> None:
        """A traceback block on stderr: the first line stamped (the scheduler's prefix unless ``prefix`` says
        otherwise), the rest as Python prints them."""
        first, *rest = lines
        stamp = self.stamp(self.rank if prefix is None else prefix)
        self.write("".join([f"{stamp} {first}\n", *(f"{line}\n" for line in rest)]), sys.stderr)


class Worker:
    """One run of the simulated server: startup, failure, steady state, shutdown."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self.gpus = [int(g) for g in args.gpus.split(",") if g.strip()] or [0]
        self.server: WorkerServer | None = None
        self.bootstrap: BootstrapServer | None = None
        self.squatter: socket.socket | None = None
        self.words = WORDINGS[args.generation]
        first_tp = args.node_rank * max(1, (args.tp or len(self.gpus) * args.nnodes) // args.nnodes)
        self.log = Log(f" TP{first_tp}" if (args.tp or len(self.gpus)) > 1 or not self.words.rank_prefix_when_many
                       else "")
        self.group = Group(args.node_rank, args.nnodes, args.dist_init_addr, self.stop, self.log.main) \
            if args.nnodes > 1 else None
        self.serving = Serving(args.role, args.max_running_requests or DEFAULT_CAPACITY)
        self.state = WorkerState(role=args.role, model=args.model, host=args.host, port=args.port,
                                 bootstrap_port=args.bootstrap_port, tp_size=len(self.gpus),
                                 dummy=args.node_rank > 0,
                                 access_log=self.log.main, serving=self.serving,
                                 fail_generate=args.fail == "generate-500",
                                 transfer_errors=args.fail == "transfer-errors", error_log=self.log.tp_error,
                                 fail_later=self._window("generate-fails-later"),
                                 transfer_later=self._window("transfer-errors-later"),
                                 transfer_stalls=self._window("transfer-stalls", forever=True),
                                 server_args={"page_size": args.page_size, "kv_cache_dtype": args.kv_cache_dtype,
                                              "revision": args.revision,
                                              "disaggregation_transfer_backend": self._transfer_backend(),
                                              "disaggregation_ib_device": args.ib_device,
                                              "version": WORDINGS[args.generation].version},
                                 prefills=PrefillInfo(args.unreachable_bootstrap),
                                 answer=ANSWERS.get(args.fail or "", "content"),
                                 server_info_hangs=args.fail == "server-info-hangs",
                                 serves_ready=self.words.serves_ready,
                                 content_beside_reasoning=self.words.content_beside_reasoning)
        if args.enable_metrics:
            self.state.metrics = self._metrics()

    def _transfer_backend(self) -> str:
        """The transfer backend as the server resolves it (0.5.23: ``mooncake_tcp`` is Mooncake forced onto TCP)."""
        if self.args.transfer_backend == "mooncake_tcp" and self.words.tcp_as_mooncake:
            return "mooncake"
        return self.args.transfer_backend

    def _window(self, mode: str, *, forever: bool = False) -> FailWindow | None:
        """The while of failures ``--fail MODE`` plays (``--fail-after``, ``--fail-for``; without it, FAIL_FOR
        seconds or, ``forever``, no end), when it is that mode."""
        if self.args.fail != mode:
            return None
        length = self.args.fail_for if self.args.fail_for is not None else math.inf if forever else FAIL_FOR
        return FailWindow(self.args.fail_after, length)

    def _metrics(self) -> Callable[[], tuple[bytes, str]]:
        """What ``GET /metrics`` answers: the registry's text, in SGLang's names for this generation."""
        from pdtui.sim.metrics import CONTENT_TYPE, Metrics  # prometheus_client: only with --enable-metrics
        metrics = Metrics(self.serving, self.args.model, self.words.inter_token_metric, kv_series=self.words.kv_series,
                          tp_size=len(self.gpus))
        self.state.count_transfer_failure = metrics.transfer_failed
        return lambda: (metrics.render(), CONTENT_TYPE)

    def at(self, fraction: float) -> bool:
        """Sleep until ``fraction`` of the startup time has passed; False if asked to stop."""
        delay = self.t0 + fraction * self.args.startup - time.monotonic()
        return not self.stop.wait(delay) if delay > 0 else not self.stop.is_set()

    def run(self) -> int:
        """The whole life of the process; returns its exit status."""
        try:
            status = self._startup()
            if status is None:
                status = self._steady()
        finally:
            self._shutdown()
        return status

    def _startup(self) -> int | None:
        """Startup up to the ready line; an exit status if it ended early, None once ready."""
        fail, log = self.args.fail, self.log
        if self.args.role == "prefill" and self.args.transfer_backend == "fake":
            return self._refused(fake_prefill_traceback())
        if self._transfer_backend() != self.args.transfer_backend:
            log.main("disaggregation transfer backend 'mooncake_tcp' -> mooncake with MC_FORCE_TCP=1 (TCP transport, "
                     "no RDMA)")
        if self.args.attention_backend == "torch_native":
            log.main("Cuda graph is disabled because of using torch native attention backend")
        log.main(f"server_args={server_args_repr(self.args, self.gpus, as_dict=self.words.args_as_dict)}")
        if self.args.role == "prefill" and self.words.bootstrap_first and not self.follower:
            self._start_bootstrap()
        if not self.at(0.05):
            return 0
        log.tp(self.words.parallel[0])
        if fail == "hang-dist":         # a rank >= 1: it never reaches rank 0, and says so as it retries
            if self.group is not None and self.follower:
                self.group.never_join()
            self.stop.wait()
            return 0
        if self.group is not None:
            met = self._meet()
            if met is not None:
                return met
        if fail == "nccl":
            return self._crash(nccl_traceback(), 0.1)
        steps = [
            (0.10, log.tp, self.words.parallel[1]),
            *([(0.11, log.tp, "Memory baseline taken. mem usage=1.96 GB")] if self.words.startup_timings else []),
            (0.12, log.tp, "Load weight begin. avail mem=137.34 GB"),
            (0.13, log.progress, "Multi-thread loading shards"),
            (0.40, log.tp, "Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, "
                           "avail mem=71.08 GB, mem usage=66.26 GB."),
            (0.45, log.tp, f"KV Cache is allocated. #tokens: {MAX_TOTAL_TOKENS}, K size: 24.12 GB, V size: 24.12 GB"),
            (0.46, log.tp, "Memory pool end. avail mem=14.61 GB"),
            *([(0.47, log.main, SMALL_POOL)] if fail == "small-kv-pool" else []),
        ]
        if not self._steps(steps):
            return 0
        if fail == "mooncake":
            return self._crash(mooncake_traceback(), 0.47)
        if fail == "crash":
            return self._crash(unknown_traceback(), 0.47, header=False)
        if self.args.role == "prefill" and not self.words.bootstrap_first and not self.follower:
            self._start_bootstrap()
        if graphs(self.args) and not self._steps([(0.50, log.tp, self.words.graph_begin)]):
            return 0
        if fail == "oom":
            return self._crash(oom_traceback(self.gpus[0]), 0.6)
        if fail == "hang":
            self.stop.wait()
            return 0
        return self._serve()

    @property
    def follower(self) -> bool:
        """A rank >= 1 of a server over several nodes: no HTTP API, no bootstrap server, a dummy /health."""
        return self.args.node_rank > 0

    def _meet(self) -> int | None:
        """The ranks meet at rank 0 (an exit status if they cannot: stopped meanwhile, or rank 0's port taken);
        the steps after it keep their spacing from the moment all have joined."""
        assert self.group is not None
        began = time.monotonic()
        try:
            if not self.group.meet():
                return 0
        except OSError as exc:
            return self._crash(listen_traceback(self.group.port, exc), 0.0)
        self.t0 += time.monotonic() - began
        self.group.watch(self._peer_lost)
        return None

    def _peer_lost(self, peer: str) -> None:
        """Another rank of this server went away: this one's next collective fails (gloo), its scheduler raises
        and the process tree is killed, as SGLang's does."""
        self.log.error_block(gloo_traceback(peer))
        self.log.write(f"{Log.stamp()} {self.words.sigquit}\n", sys.stderr)
        os._exit(1)

    def _start_bootstrap(self) -> None:
        """The prefill's bootstrap server; one that cannot bind logs SGLang's error and the server goes on."""
        host, port = self.args.host, self.args.bootstrap_port
        if self.args.fail == "bootstrap-port-in-use":
            self.squatter = socket.create_server((host, port))   # another process holding the port
        try:
            self.bootstrap = BootstrapServer(host, port)
        except OSError as exc:
            reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            if not self.words.bootstrap_first:      # uvloop's words then repeated the error number
                reason = f"[errno {exc.errno}] {reason}"
            said = f"[Errno {exc.errno}] error while attempting to bind on address ('{host}', {port}): {reason}"
            frame = (_frame("disaggregation/common/conn.py", 3320, "_run_server",
                            "self._loop.run_until_complete(site.start())") if self.words.bootstrap_first else
                     _frame("disaggregation/common/conn.py", 3318, "run_server",
                            "self._loop.run_until_complete(self._runner_setup_and_start())"))
            self.log.error_block([f"Server error: {said}", "Traceback (most recent call last):", *frame,
                                  f"OSError: {said}"], prefix="" if self.words.bootstrap_first else None)
            return
        self.bootstrap.start()
        if self.words.bootstrap_started:
            self._bootstrap_log(self.words.bootstrap_started.format(host=host, port=port))

    def _bootstrap_log(self, message: str) -> None:
        """The bootstrap server's line: its scheduler's where it starts there, the main process's (0.5.23)."""
        (self.log.main if self.words.bootstrap_first else self.log.tp)(message)

    def _steps(self, steps: list) -> bool:
        for fraction, write, message in steps:
            if not self.at(fraction):
                return False
            write(message)
        return True

    def _serve(self) -> int | None:
        if self.follower:
            return self._dummy_health()
        log = self.log
        steps = [
            *([(0.75, log.main, self.words.graph_end)] if graphs(self.args) else []),
            (0.76, log.main, f"max_total_num_tokens={MAX_TOTAL_TOKENS}, chunked_prefill_size=8192, "
                             f"max_prefill_tokens=16384, max_running_requests={self.serving.capacity}, "
                             "context_len=32768, available_gpu_mem=12.51 GB"),
            *([(0.79, log.main, STARTUP_TIMINGS)] if self.words.startup_timings else []),
            (0.80, log.main, f"INFO:     Started server process [{os.getpid()}]"),
            (0.80, log.main, "INFO:     Waiting for application startup."),
            (0.80, log.main, "INFO:     Application startup complete."),
        ]
        if not self._steps(steps):
            return 0
        if not self._bind():
            if self.words.exits_on_bind_error:
                return 1
            self.stop.wait()      # 0.5.23: its other processes hold it up; it never exits by itself
            return 0
        log.main(f"INFO:     Uvicorn running on http://{self.args.host}:{self.args.port} (Press CTRL+C to quit)")
        return self._warm_up()

    def _dummy_health(self) -> int | None:
        """A rank >= 1 once its schedulers are ready: no tokenizer, no API, a dummy health server (0.5.23's)."""
        steps = [
            *([(0.75, self.log.tp, self.words.graph_end)] if graphs(self.args) else []),
            (0.76, self.log.tp, f"max_total_num_tokens={MAX_TOTAL_TOKENS}, chunked_prefill_size=8192, "
                                f"max_prefill_tokens=16384, max_running_requests={self.serving.capacity}, "
                                "context_len=32768, available_gpu_mem=12.51 GB"),
        ]
        if not self._steps(steps) or not self.at(0.9):
            return 0
        if not self._bind():
            return 1
        self.state.healthy.set()
        self.log.main(f"Dummy health check server started in background thread at {self.args.host}:{self.args.port}")
        return None

    def _bind(self) -> bool:
        """Bind the HTTP port now, as uvicorn does; the real ERROR line if it is taken."""
        try:
            if self.args.fail == "port-in-use":
                raise OSError(errno.EADDRINUSE, "address already in use")
            self.server = WorkerServer(self.state)
        except OSError as exc:
            reason = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            self.log.write(f"{Log.stamp()} ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                           f"('{self.args.host}', {self.args.port}): {reason}\n", sys.stderr)
            self.log.main("INFO:     Waiting for application shutdown.")
            if self.words.exits_on_bind_error:
                self.log.main("INFO:     Application shutdown complete.")
            return False
        self.server.start()
        if self.words.health_before_warmup == 200:
            self.state.healthy.set()     # the oldest /health: 200 from the moment HTTP is up
        return True

    def _warm_up(self) -> int | None:
        """SGLang's PD warm-up: a request to itself; /health turns 200 only if it succeeded."""
        log = self.log
        client = 40000 + self.args.port % 20000    # the warm-up's own client port, an ephemeral one
        if not self.at(0.84):
            return 0
        log.main(f'INFO:     127.0.0.1:{client} - "GET {self.words.model_info} HTTP/1.1" 200 OK')
        log.main(self.words.warmup_start)
        if self.args.fail == "hang-warmup" or (self.args.fail == "small-kv-pool" and self.args.role == "decode"):
            self.stop.wait()
            return 0
        if not self.at(0.90):
            return 0
        if self.args.role == "prefill":
            log.tp(self._prefill_line(Prefilled(1, 4, 0), WARMUP_LOAD))
        else:
            log.tp(self._decode_line(dataclasses.replace(WARMUP_LOAD, running=1, used_tokens=4, gen_throughput=0.98)))
        if not self.at(0.98):
            return 0
        failed = self.args.fail == "warmup-failed"
        status = "400 Bad Request" if failed else "200 OK"
        log.main(f'INFO:     127.0.0.1:{client + 2} - "POST /generate HTTP/1.1" {status}')
        if failed:
            log.main(self.words.warmup_failure(self.args.role))
        else:
            for line in self.words.warmup_ok:
                log.main(line)
            self.state.up.set()
        # Status leaves Starting either way: /health runs its one-token generate and answers 200,
        # after a failed warm-up too. Only the failure line tells.
        self.state.healthy.set()
        if not self.at(1.0):
            return 0
        log.main("The server is fired up and ready to roll!")
        return None

    def _steady(self) -> int:
        """Batch lines at ``--log-rate`` until stopped (or the scripted crash)."""
        rate = self.args.log_rate
        start = time.monotonic()
        crash_at = start + 1.0 if self.args.fail in ("crash-after-ready", "scheduler-killed") else None
        traceback_at = start + 1.0 if self.args.fail == "request-traceback" else None
        written = 0
        while not self.stop.is_set():
            now = time.monotonic()
            if crash_at is not None and now >= crash_at:
                if self.args.fail == "scheduler-killed":
                    self._killed_tree()
                    return 0          # stopped meanwhile: its end is the stop's
                return self._crash(crash_traceback(), 0.0)
            if traceback_at is not None and now >= traceback_at:
                traceback_at = None
                self.log.error_block(request_traceback(), prefix="")
            due = 0 if self.follower else int((now - start) * rate) - written
            if due > 0:
                self.log.write(self._batch_lines(due))
                written += due
            wake = start + (written + 1) / rate
            for event_at in (crash_at, traceback_at):
                if event_at is not None:
                    wake = min(wake, event_at)
            self.stop.wait(max(0.005, wake - time.monotonic()))
        return 0

    def _batch_lines(self, count: int) -> str:
        """``count`` batch lines with the server's figures now; a prefill's first tells what it prefilled since
        its last line (the others, due at the same moment, none)."""
        stamp, load = Log.stamp(" TP0"), self.serving.snapshot()
        if self.args.role == "decode":
            return f"{stamp} {self._decode_line(load)}\n" * count
        lines = []
        for n in range(count):
            done = self.serving.take_prefilled() if n == 0 else Prefilled()
            lines.append(f"{stamp} {self._prefill_line(done, load)}\n")
        return "".join(lines)

    def _decode_line(self, load: Load) -> str:
        """A decode's batch line in its generation's words (0.5.23: the PD queues' counts, the graph's use)."""
        sep = self.words.batch_sep
        pd = (f"pre-allocated usage: 0.00, #prealloc-req: {load.decode_prealloc}, "
              f"#transfer-req: {load.decode_transfer}, #retracted-req: 0, cuda graph: True, " if sep == "," else "")
        return (f"Decode batch{sep} #running-req: {load.running}, #token: {load.used_tokens}, "
                f"token usage: {load.token_usage:.2f}, {pd}gen throughput (token/s): {load.gen_throughput:.2f}, "
                f"#queue-req: {load.queued}")

    def _prefill_line(self, done: Prefilled, load: Load) -> str:
        sep = self.words.batch_sep
        pd = (f"#pending-token: 0, #bootstrap-req: {load.prefill_bootstrap}, #inflight-req: {load.prefill_inflight}, "
              f"#optimistic-req: 0, cuda graph: False, input throughput (token/s): {done.new_tokens:.2f}"
              if sep == "," else "")
        return (f"Prefill batch{sep} #new-seq: {done.seqs}, #new-token: {done.new_tokens}, "
                f"#cached-token: {done.cached_tokens}, token usage: {load.token_usage:.2f}, "
                f"#running-req: {load.running}, #queue-req: {load.queued}" + (f", {pd}" if pd else ""))

    def _killed_tree(self) -> None:
        """0.5.23 when a process of its own was killed: it says which, then kills its tree, itself last (SIGKILL:
        systemd sees its main process killed, result 'signal')."""
        pid = os.getpid()
        self.log.main(f"Subprocess scheduler_0 (pid={pid + 1}) crashed with exit code -9. Triggering SIGQUIT for "
                      "cleanup...")
        if not self.stop.wait(0.2):
            self.log.main(f"kill_process_tree called: parent_pid={pid}, include_parent=True, pid={pid}")
            os.kill(pid, signal.SIGKILL)

    def _refused(self, traceback: list[str]) -> int:
        """SGLang's arguments refused before any process starts: the clean-up's line, the bare traceback, exit 1."""
        self.log.main(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=False, pid={os.getpid()}")
        self.log.write("".join(f"{line}\n" for line in traceback), sys.stderr)
        return 1

    def _crash(self, traceback: list[str], fraction: float, *, header: bool = True) -> int:
        """Print a scheduler exception and the parent's SIGQUIT line, as a crashing SGLang does; without
        ``header``, a bare traceback as Python prints one that nothing caught, and the exit."""
        if not self.at(fraction):
            return 0
        if not header:
            self.log.write("".join(f"{line}\n" for line in traceback), sys.stderr)
            return 1
        self.log.error_block(traceback)
        self.log.write(f"{Log.stamp()} {self.words.sigquit}\n", sys.stderr)
        return 1

    def _shutdown(self) -> None:
        if self.group is not None:
            self._leave(self.group)
        if self.bootstrap is not None:
            self.bootstrap.stop()
        if self.squatter is not None:
            self.squatter.close()
        if self.server is None:
            return
        if self.stop.is_set():
            for message in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                            f"Finished server process [{os.getpid()}]"):
                self.log.main(f"INFO:     {message}")
        self.server.shutdown()
        self.server.server_close()


    def _leave(self, group: Group) -> None:
        """Rank 0 tells the others to end; a rank >= 1 stopped on its own waits for that, as SGLang's does (the
        sim a few seconds only: the real one until its unit's stop timeout kills it)."""
        if self.follower and self.stop.is_set() and not group.told_to_end.is_set():
            self.log.main(f"SIGTERM received on node_rank {self.args.node_rank}; waiting for the rank-0 ShutdownReq "
                          "broadcast (the server's shutdown goes through rank 0)")
            group.told_to_end.wait(FOLLOWER_STOP_WAIT)
        group.leave()


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{SGLANG}/{path}", line {line}, in {func}', f"    {code}"]


def graphs(args: argparse.Namespace) -> bool:
    """Whether the server captures CUDA graphs: not with torch's native attention (a CPU's), nor when told not to."""
    return not (args.disable_cuda_graph or args.attention_backend == "torch_native")


def fake_prefill_traceback() -> list[str]:
    """0.5.23's refusal of ``fake`` on a prefill, as a real one printed it."""
    return [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "<frozen runpy>", line 88, in _run_code',
        *_frame("../launch_server.py", 29, "run_server", "server_args.resolve_once()"),
        *_frame("server_args.py", 277, "resolve_once", "run_resolution_pipeline(self)"),
        *_frame("arg_groups/pipeline.py", 147, "run_resolution_pipeline",
                "run_hook(handle_pd_disaggregation, server_args)"),
        *_frame("arg_groups/pd_disaggregation_hook.py", 146, "handle_pd_disaggregation",
                'assert cfg.disaggregation_transfer_backend != "fake", ('),
        "AssertionError: Prefill server does not support 'fake' as the transfer backend",
    ]


def oom_traceback(gpu: int) -> list[str]:
    return [
        "Scheduler hit an exception: Traceback (most recent call last):",
        *_frame("managers/scheduler.py", 2712, "run_scheduler_process",
                "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
        *_frame("model_executor/model_runner.py", 412, "__init__", "self.init_device_graphs()"),
        *_frame("model_executor/cuda_graph_runner.py", 380, "capture", ") = self.capture_one_batch_size(bs, forward)"),
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU {gpu} has a total capacity "
        f"of 95.00 GiB of which 312.06 MiB is free. Including non-PyTorch memory, this process has 94.68 GiB memory "
        f"in use. Of the allocated memory 91.20 GiB is allocated by PyTorch, and 1.94 GiB is reserved by PyTorch but "
        f"unallocated.",
        "",
    ]


def gloo_traceback(peer: str) -> list[str]:
    """A scheduler's next collective after another rank of its server died (gloo's CPU group, as sglang#7458)."""
    return [
        "Scheduler hit an exception: Traceback (most recent call last):",
        *_frame("managers/scheduler.py", 2730, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        *_frame("managers/scheduler.py", 1081, "recv_requests",
                "recv_reqs = broadcast_pyobj(recv_reqs, self.tp_group.rank, self.tp_cpu_group)"),
        *_frame("utils/common.py", 1270, "broadcast_pyobj", "dist.broadcast(tensor_size, src=src, group=dist_group)"),
        f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [{peer}]",
        "",
    ]


def listen_traceback(port: int, exc: OSError) -> list[str]:
    """Rank 0 cannot listen at its --dist-init-addr (torch's TCPStore server)."""
    return [
        "Scheduler hit an exception: Traceback (most recent call last):",
        *_frame("distributed/parallel_state.py", 1318, "init_distributed_environment",
                "torch.distributed.init_process_group("),
        f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        f"port: {port}, useIpv6: false, code: -{exc.errno}, name: {errno.errorcode.get(exc.errno or 0, 'EUNKNOWN')}, "
        f"message: {exc.strerror or 'address already in use'}",
        "",
    ]


def nccl_traceback() -> list[str]:
    return [
        "Scheduler hit an exception: Traceback (most recent call last):",
        *_frame("managers/scheduler.py", 2712, "run_scheduler_process",
                "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
        *_frame("distributed/parallel_state.py", 1318, "init_distributed_environment",
                "torch.distributed.all_reduce(data, group=_WORLD.cpu_group)"),
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "",
    ]


def unknown_traceback() -> list[str]:
    """What no signature knows: only the process's exit tells, and the exception it ended in says why."""
    return [
        "Traceback (most recent call last):",
        *_frame("entrypoints/http_server.py", 1187, "launch_server", "launch_subprocesses(server_args=server_args)"),
        *_frame("entrypoints/engine.py", 731, "_launch_subprocesses", "raise ValueError(msg)"),
        "ValueError: the sim's model config names an attention backend this build does not have",
    ]


def mooncake_traceback() -> list[str]:
    """As a real server printed it when its unit's LimitMEMLOCK was too low: the cause is the last line."""
    return [
        "Scheduler hit an exception: Traceback (most recent call last):",
        *_frame("managers/scheduler.py", 2712, "run_scheduler_process",
                "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
        *_frame("disaggregation/mooncake/conn.py", 188, "register_buffer_to_engine",
                "self.engine.batch_register(self.kv_args.kv_data_ptrs, self.kv_args.kv_data_lens)"),
        *_frame("disaggregation/mooncake/transfer_engine.py", 96, "batch_register",
                'raise RuntimeError("Mooncake memory registration failed.")'),
        "RuntimeError: Mooncake memory registration failed.",
        "",
    ]


def request_traceback() -> list[str]:
    """uvicorn's line for one request that raised: the server answers the next request normally."""
    return [
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, '
        'in run_asgi',
        "    result = await app(  # type: ignore[func-returns-value]",
        *_frame("entrypoints/http_server.py", 1187, "openai_v1_chat_completions",
                "return await raw_request.app.state.openai_serving_chat.handle_request(request, raw_request)"),
        "ValueError: Unknown message role 'tool_result' (expected system, user, assistant or tool)",
    ]


def crash_traceback() -> list[str]:
    return [
        "Scheduler hit an exception: Traceback (most recent call last):",
        *_frame("managers/scheduler.py", 2730, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        *_frame("managers/scheduler.py", 1012, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "",
    ]


def server_args_repr(args: argparse.Namespace, gpus: list[int], *, as_dict: bool = False) -> str:
    """SGLang's first line, the full ServerArgs repr (0.5.23: a dict of them): several KB, so journalctl shows it
    as null without --all."""
    fields = {
        "model_path": args.model, "tokenizer_path": args.model, "tokenizer_mode": "auto",
        "skip_tokenizer_init": False, "load_format": "auto", "model_loader_extra_config": "{}",
        "trust_remote_code": True, "context_length": None, "is_embedding": False, "enable_multimodal": None,
        "revision": args.revision, "model_impl": "auto", "host": args.host, "port": args.port, "skip_server_warmup": False,
        "warmups": None, "nccl_port": None, "dtype": "auto", "quantization": "fp8", "quantization_param_path": None,
        "kv_cache_dtype": args.kv_cache_dtype, "mem_fraction_static": 0.82, "max_running_requests": args.max_running_requests,
        "max_queued_requests": None, "max_total_tokens": None, "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384, "schedule_policy": "fcfs", "schedule_conservativeness": 1.0,
        "page_size": args.page_size, "hybrid_kvcache_ratio": None, "swa_full_tokens_ratio": 0.8,
        "disable_hybrid_swa_memory": False, "device": "cuda", "tp_size": len(gpus), "pp_size": 1,
        "max_micro_batch_size": None, "stream_interval": 1, "stream_output": False, "random_seed": 1013566221,
        "constrained_json_whitespace_pattern": None, "watchdog_timeout": 300, "dist_timeout": None,
        "download_dir": None, "base_gpu_id": gpus[0], "gpu_id_step": 1, "sleep_on_idle": False,
        "log_level": "info", "log_level_http": None, "log_requests": False, "log_requests_level": 2,
        "crash_dump_folder": None, "show_time_cost": False, "enable_metrics": args.enable_metrics,
        "enable_metrics_for_all_schedulers": False, "bucket_time_to_first_token": None,
        "bucket_inter_token_latency": None, "bucket_e2e_request_latency": None, "collect_tokens_histogram": False,
        "decode_log_interval": 40, "enable_request_time_stats_logging": False, "kv_events_config": None,
        "gc_warning_threshold_secs": 0.0, "api_key": getattr(args, "api_key", None), "served_model_name": args.model,
        "weight_version": "default", "chat_template": None, "completion_template": None,
        "file_storage_path": "sglang_storage", "enable_cache_report": False, "reasoning_parser": "deepseek-v3",
        "tool_call_parser": "deepseekv3", "tool_server": None, "dp_size": 1, "load_balance_method": "round_robin",
        "dist_init_addr": None, "nnodes": 1, "node_rank": 0, "json_model_override_args": "{}",
        "preferred_sampling_params": None, "enable_lora": None, "max_lora_rank": None, "lora_target_modules": None,
        "lora_paths": None, "max_loaded_loras": None, "max_loras_per_batch": 8, "lora_backend": "triton",
        "attention_backend": args.attention_backend, "decode_attention_backend": None, "prefill_attention_backend": None,
        "sampling_backend": "flashinfer", "grammar_backend": "xgrammar", "mm_attention_backend": None,
        "speculative_algorithm": None, "speculative_draft_model_path": None, "speculative_num_steps": None,
        "speculative_eagle_topk": None, "speculative_num_draft_tokens": None, "ep_size": len(gpus),
        "moe_a2a_backend": "deepep", "moe_runner_backend": "auto", "flashinfer_mxfp4_moe_precision": "default",
        "enable_flashinfer_allreduce_fusion": False, "deepep_mode": "auto", "ep_num_redundant_experts": 0,
        "ep_dispatch_algorithm": "static", "init_expert_location": "trivial", "enable_eplb": False,
        "eplb_algorithm": "auto", "eplb_rebalance_num_iterations": 1000, "eplb_rebalance_layers_per_chunk": None,
        "expert_distribution_recorder_mode": None, "expert_distribution_recorder_buffer_size": 1000,
        "enable_expert_distribution_metrics": False, "deepep_config": None, "moe_dense_tp_size": None,
        "enable_hierarchical_cache": False, "hicache_ratio": 2.0, "hicache_size": 0,
        "hicache_write_policy": "write_through", "hicache_io_backend": "kernel", "hicache_mem_layout": "layer_first",
        "hicache_storage_backend": None, "hicache_storage_prefetch_policy": "best_effort",
        "enable_double_sparsity": False, "ds_channel_config_path": None, "ds_heavy_channel_num": 32,
        "ds_heavy_token_num": 256, "ds_heavy_channel_type": "qk", "ds_sparse_decode_threshold": 4096,
        "cpu_offload_gb": 0, "offload_group_size": -1, "offload_num_in_group": 1, "offload_prefetch_step": 1,
        "offload_mode": "cpu", "disable_radix_cache": False, "cuda_graph_max_bs": 256, "cuda_graph_bs": None,
        "disable_cuda_graph": not graphs(args), "disable_cuda_graph_padding": False, "enable_profile_cuda_graph": False,
        "enable_cudagraph_gc": False, "enable_nccl_nvls": False, "enable_symm_mem": False,
        "disable_flashinfer_cutlass_moe_fp4_allgather": False, "enable_tokenizer_batch_encode": False,
        "disable_outlines_disk_cache": False, "disable_custom_all_reduce": False, "enable_mscclpp": False,
        "disable_overlap_schedule": False, "enable_mixed_chunk": False, "enable_dp_attention": False,
        "enable_dp_lm_head": False, "enable_two_batch_overlap": False, "tbo_token_distribution_threshold": 0.48,
        "enable_torch_compile": False, "torch_compile_max_bs": 32, "torchao_config": "",
        "enable_nan_detection": False, "enable_p2p_check": False, "triton_attention_reduce_in_fp32": False,
        "triton_attention_num_kv_splits": 8, "num_continuous_decode_steps": 1, "delete_ckpt_after_loading": False,
        "enable_memory_saver": False, "allow_auto_truncate": False, "enable_custom_logit_processor": False,
        "flashinfer_mla_disable_ragged": False, "disable_shared_experts_fusion": False,
        "disable_chunked_prefix_cache": False, "disable_fast_image_processor": False, "enable_return_hidden_states": False,
        "scheduler_recv_interval": 1, "numa_node": None, "debug_tensor_dump_output_folder": None,
        "debug_tensor_dump_input_file": None, "debug_tensor_dump_inject": False, "debug_tensor_dump_prefill_only": False,
        "disaggregation_mode": args.role, "disaggregation_transfer_backend": args.transfer_backend,
        "disaggregation_bootstrap_port": args.bootstrap_port, "disaggregation_decode_tp": None,
        "disaggregation_decode_dp": None, "disaggregation_prefill_pp": 1, "disaggregation_ib_device": args.ib_device,
        "num_reserved_decode_tokens": 512, "pdlb_url": None, "custom_weight_loader": [],
        "weight_loader_disable_mmap": False, "enable_pdmux": False, "sm_group_num": 3,
    }
    if as_dict:
        return repr(fields)
    return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


SIM_ONLY = frozenset({"--role", "--bootstrap-port", "--startup", "--fail", "--fail-after", "--fail-for",
                      "--unreachable-bootstrap", "--generation", "--log-rate", "--gpus", "--fail-rank", "--rank-ports"})
"""The sim's own flags (how it plays a failure, how long it takes): every other flag of its parser is SGLang's, as
SGLang 0.5.23 reads it (tests/integration/test_real_sglang_conformance.py holds it to that)."""


def build_parser() -> argparse.ArgumentParser:
    """The sim's own flags (:data:`SIM_ONLY`), and SGLang's own for what they mean here (so a generated unit runs it
    as it is), each as SGLang 0.5.23 spells it, with its choices where the sim has them: what the preflight's flag
    check asks the sim (servers/arguments_probe.py), as it asks a real SGLang its parser."""
    parser = argparse.ArgumentParser(prog="pdtui.sim.worker", description="A simulated SGLang PD worker.")
    parser.add_argument("--role", "--disaggregation-mode", dest="role", choices=("prefill", "decode"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--bootstrap-port", "--disaggregation-bootstrap-port", dest="bootstrap_port", type=int,
                        default=8998)
    parser.add_argument("--startup", type=float, default=3.0, help="seconds from start to the ready line")
    parser.add_argument("--fail", choices=FAIL_MODES, default=None)
    parser.add_argument("--fail-after", type=float, default=FAIL_AFTER,
                        help="generate-fails-later, transfer-errors-later, transfer-stalls: seconds from the first "
                             "generation served until they fail")
    parser.add_argument("--fail-for", type=float, default=None,
                        help=f"generate-fails-later, transfer-errors-later, transfer-stalls: seconds they keep "
                             f"failing (default {FAIL_FOR:g}; transfer-stalls: no end)")
    parser.add_argument("--unreachable-bootstrap", type=_ports, default=frozenset(), metavar="PORT[,PORT...]",
                        help="a decode: these prefill bootstrap ports refuse it, as a firewall between two nodes "
                             "would (every request from those prefills fails); sim only")
    parser.add_argument("--generation", choices=GENERATIONS, default=DEFAULT_GENERATION,
                        help="which SGLang release's wording and /health behaviour to play")
    parser.add_argument("--model", "--model-path", dest="model", default=DEFAULT_MODEL)
    parser.add_argument("--api-key", default=None, help="printed in server_args, as SGLang does (its API key itself "
                                                        "is not checked by the sim)")
    parser.add_argument("--log-rate", type=float, default=0.5, help="steady-state batch lines per second")
    parser.add_argument("--enable-metrics", action="store_true", help="serve SGLang's Prometheus metrics on /metrics")
    parser.add_argument("--max-running-requests", type=int, default=None,
                        help=f"requests running at once, the rest queue (default {DEFAULT_CAPACITY})")
    parser.add_argument("--gpus", default=None, help="GPU indexes (default: CUDA_VISIBLE_DEVICES, else 0)")
    parser.add_argument("--tp", "--tp-size", dest="tp", type=int, default=None)
    parser.add_argument("--disaggregation-transfer-backend", dest="transfer_backend", default="mooncake")
    parser.add_argument("--disaggregation-ib-device", dest="ib_device", default=None)
    parser.add_argument("--page-size", type=int, default=None,
                        help="the KV cache's page size (default: DeepSeek's MLA's 64; 1 with torch_native attention)")
    parser.add_argument("--attention-backend", default="flashmla")
    parser.add_argument("--disable-cuda-graph", action="store_true")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--revision", default=None)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    parser.add_argument("--fail-rank", type=int, default=0,
                        help="a server over several nodes: the node whose rank plays --fail (sim only)")
    parser.add_argument("--rank-ports", type=_port_list, default=None, metavar="PORT,PORT...",
                        help="ranks that share this machine (a private cluster's nodes all are): rank R listens on "
                             "the R-th of these instead of --port (sim only)")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The worker's flags read. SGLang flags the sim has no use for (``--trust-remote-code``,
    ``--mem-fraction-static 0.82``) are taken and ignored here; the preflight's flag check refuses them in the sim's
    deployments, as it refuses any flag the installed engine does not list."""
    parser = build_parser()
    args, _sglang_only = parser.parse_known_args(argv)
    if args.nnodes > 1 and not args.dist_init_addr:
        parser.error("--nnodes above 1 needs --dist-init-addr HOST:PORT")
    if not 0 <= args.node_rank < args.nnodes:
        parser.error(f"--node-rank must be 0 to {args.nnodes - 1}")
    if args.fail_rank != args.node_rank:
        args.fail = None       # another node's to play
    if args.rank_ports is not None:
        if len(args.rank_ports) != args.nnodes:
            parser.error(f"--rank-ports needs one port per node ({args.nnodes}), got {len(args.rank_ports)}")
        args.port = args.rank_ports[args.node_rank]
    if args.log_rate <= 0:
        parser.error("--log-rate must be positive")
    if args.max_running_requests is not None and args.max_running_requests < 1:
        parser.error("--max-running-requests must be at least 1")
    if args.gpus is None:
        args.gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or "0"
    if args.page_size is None:
        args.page_size = 1 if args.attention_backend == "torch_native" else 64
    return args


def _port_list(text: str) -> list[int]:
    """``PORT,PORT...`` in order."""
    try:
        return [int(word) for word in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PORT,PORT..., got {text!r}") from None


def _ports(text: str) -> frozenset[int]:
    """``PORT[,PORT...]`` as argparse takes it."""
    try:
        ports = frozenset(int(word) for word in text.split(",") if word.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PORT[,PORT...], got {text!r}") from None
    if not ports or not all(0 < port < 65536 for port in ports):
        raise argparse.ArgumentTypeError(f"expected PORT[,PORT...] with ports 1-65535, got {text!r}")
    return ports


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    worker = Worker(args)
    set_on_signal(worker.stop, signal.SIGTERM, signal.SIGINT)
    return worker.run()


if __name__ == "__main__":
    raise SystemExit(main())
