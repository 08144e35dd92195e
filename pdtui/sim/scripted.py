"""A scripted EventSource and deterministic bring-ups, for the faces without an engine behind them.

Everything drawn comes from these events: fixed host names, fixed ports, fixed
elapsed values, so what the UI's tests snapshot never changes between runs, and
the TUI's own cost can be measured apart from the engine's (bench/tui_lines.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence

from pdtui.engine.events import (
    Done,
    Event,
    LineKind,
    LogLines,
    LogRecord,
    Notice,
    PairMatrix,
    PairResult,
    PhaseStarted,
    PlanReady,
    PreflightFinding,
    ProbeResult,
    ServerFailed,
    ServiceInfo,
    StateChanged,
    Step,
    StepChanged,
    StepStatus,
)
from pdtui.engine.intent import RestartHow
from pdtui.engine.states import ServiceState as S
from pdtui.gpus.inventory import GpuInfo
from pdtui.gpus.sampler import GpuSample

T0 = 1_760_605_569.0  # 2025-10-16 09:06:09 UTC: journal timestamps of the scripted lines


class ScriptedSource:
    """Plays a script when run; more events can be emitted by the test; records retries, restarts and stops."""

    def __init__(self, script: Sequence[Event] = (), *, retry_result: bool = True) -> None:
        self.script = list(script)
        self.callbacks: list[Callable[[Event], None]] = []
        self.retries: list[str] = []
        self.actions: list[tuple[str, str]] = []     # (verb, service) of each restart and stop asked for
        self.restarts_how: list[RestartHow] = []     # how each restart was asked for
        self.retry_result = retry_result
        self.played = False
        self.closed = False
        self.shown: list[list[str]] = []          # each set of services the app said it shows

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self.callbacks.append(callback)

    def emit(self, *events: Event) -> None:
        for event in events:
            for callback in self.callbacks:
                callback(event)

    async def run(self) -> Done:
        self.emit(*self.script)
        self.played = True
        if self.script and isinstance(self.script[-1], Done):
            return self.script[-1]
        await asyncio.Event().wait()  # a bring-up still in progress: cancelled when the app exits
        raise AssertionError("unreachable")

    def retry(self, service: str) -> bool:
        self.retries.append(service)
        return self.retry_result

    def restart(self, service: str, how: RestartHow = RestartHow.DRAIN) -> bool:
        self.actions.append(("restart", service))
        self.restarts_how.append(how)
        return True

    def stop(self, service: str) -> bool:
        self.actions.append(("stop", service))
        return True

    def show_figures(self, services) -> None:
        self.shown.append(sorted(services))

    def prove_pairs(self) -> bool:
        self.actions.append(("pairs", ""))
        return True

    async def close(self) -> None:
        self.closed = True


PREFILL = ServiceInfo("prefill", "prefill", "sglang-dsv4-prefill", "gpu0", (0, 1, 2, 3), 0, 30000, (), 360.0,
                      "systemctl restart sglang-dsv4-prefill", "systemctl stop sglang-dsv4-prefill")
DECODE = ServiceInfo("decode", "decode", "sglang-dsv4-decode", "gpu0", (4, 5, 6, 7), 1, 30002, (), 360.0,
                     "systemctl restart sglang-dsv4-decode", "systemctl stop sglang-dsv4-decode")
ROUTER = ServiceInfo("router", "router", "sglang-dsv4-router", "gpu0", (), None, 30001, ("prefill", "decode"), 120.0)
CONFIG = "/etc/pdtui/dsv4-flash-pd.yaml"
"""The config file the scripted deployments say they were read from."""
PLAN = PlanReady("dsv4-flash-pd", (PREFILL, DECODE, ROUTER), tuple(Step), config=CONFIG)

OOM_LINE = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. "
    "GPU 7 has a total capacity of 95.00 GiB"
)

HOSTILE_LINES = (
    "A" * (1024 * 1024),
    "\x1b[31mred via CSI\x1b[0m and \x1b[2J clear screen",
    "\x1b]52;c;cm0gLXJmIH4=\x07 clipboard write (OSC 52)",
    "\x1b]0;pwned title\x07 title change (OSC 0)",
    "[bold red]x[/] markup stays text",
    "[link=file:///etc/passwd]click[/link]",
    "NUL\x00 BEL\x07 BS\x08 DEL\x7f C1\x9b end",
    "invalid utf-8 decoded: \ufffd\ufffd bytes",
)


def sglang(second: int, text: str, rank: str = " TP0") -> str:
    return f"[2025-10-16 09:06:{second:02d}{rank}] {text}"


def lines(service: str, items: Sequence[tuple[int, str, LineKind]], elapsed: float, rank: str = " TP0") -> LogLines:
    records = tuple(
        LogRecord(sglang(second, text, rank), kind, T0 + second, f"c-{service}-{second}-{i}")
        for i, (second, text, kind) in enumerate(items)
    )
    return LogLines(service, records, elapsed)


N = LineKind.NORMAL
BOOT = [
    (9, "Init torch distributed ends. mem usage=1.96 GB", N),
    (10, "Load weight begin. avail mem=137.34 GB", N),
    (30, "Load weight end. type=DeepseekV4ForCausalLM, dtype=torch.bfloat16, avail mem=73.08 GB", N),
    (31, "KV Cache is allocated. #tokens: 834615, K size: 24.12 GB, V size: 24.12 GB", N),
    (31, "Capture cuda graph begin. This can take up to several minutes. avail mem=13.95 GB", N),
]


def gpus(used: Sequence[int]) -> GpuSample:
    return GpuSample(
        "gpu0",
        tuple(GpuInfo(i, "NVIDIA H20", mib, 98304, 0, 0 if i < 4 else 1) for i, mib in enumerate(used)),
        20.0,
    )


def starting_script() -> list[Event]:
    """Backends started and loading; the router blocked behind them."""
    return [
        PLAN,
        StepChanged(Step.PREFLIGHT, StepStatus.RUNNING, elapsed=0.0),
        StepChanged(Step.PREFLIGHT, StepStatus.DONE, elapsed=1.0),
        StepChanged(Step.START_BACKENDS, StepStatus.RUNNING, elapsed=1.0),
        StateChanged("prefill", S.PENDING, S.STARTING, elapsed=1.0),
        StateChanged("decode", S.PENDING, S.STARTING, elapsed=1.0),
        StateChanged("prefill", S.STARTING, S.WAITING, elapsed=2.0),
        StateChanged("decode", S.STARTING, S.WAITING, elapsed=2.0),
        StepChanged(Step.START_BACKENDS, StepStatus.DONE, elapsed=2.0),
        StepChanged(Step.WAIT_READY, StepStatus.RUNNING, "prefill, decode loading", elapsed=2.0),
        lines("prefill", BOOT, 30.0),
        lines("decode", BOOT[:4], 30.0),
        gpus([72704, 72704, 72704, 72704, 12288, 12288, 12288, 12288]),
        ProbeResult("prefill", "http /health", False, "503", 0.004, 31.0),
        StepChanged(Step.WAIT_READY, StepStatus.RUNNING, "prefill, decode loading", elapsed=47.0),
    ]


def ready_script() -> list[Event]:
    """The whole bring-up succeeds: prefill, decode, then the router."""
    ready = [
        (32, "Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=12.51 GB.", N),
        (33, "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", N),
        (40, "End of prefill disaggregation mode warmup with status 200, resp: [{'text': ' '}]", N),
        (41, "The server is fired up and ready to roll!", LineKind.READY),
    ]
    return [
        *starting_script()[:-1],
        lines("prefill", ready, 41.0),
        ProbeResult("prefill", "http /health", True, "200", 0.003, 41.0),
        StateChanged("prefill", S.WAITING, S.READY, "ready", sglang(41, ready[-1][1]), 41.0, 40.0),
        lines("decode", BOOT[4:] + ready, 47.0),
        StateChanged("decode", S.WAITING, S.READY, "ready", None, 47.0, 46.0),
        StepChanged(Step.WAIT_READY, StepStatus.DONE, elapsed=47.0),
        StepChanged(Step.START_ROUTER, StepStatus.RUNNING, elapsed=47.0),
        StateChanged("router", S.PENDING, S.STARTING, elapsed=47.0),
        StateChanged("router", S.STARTING, S.WAITING, elapsed=48.0),
        StepChanged(Step.START_ROUTER, StepStatus.DONE, elapsed=48.0),
        StepChanged(Step.PROBE_ROUTER, StepStatus.RUNNING, elapsed=48.0),
        LogLines("router", (
            LogRecord("INFO smg::server: Starting router on 0.0.0.0:30001 | mode: PrefillDecode", N, T0 + 48),
            LogRecord("INFO smg::worker: Workers initialized: 2 total, 2 healthy", N, T0 + 52),
        ), 52.0),
        StateChanged("router", S.WAITING, S.READY, "ready", None, 59.0, 12.0),
        StepChanged(Step.PROBE_ROUTER, StepStatus.DONE, elapsed=59.0),
        StepChanged(Step.DONE, StepStatus.DONE, elapsed=59.0),
        Done(True, 0, {"prefill": 40.0, "decode": 46.0, "router": 12.0}, {},
             ("sglang-dsv4-prefill", "sglang-dsv4-decode", "sglang-dsv4-router"), 59.0, ready_at=59.0),
    ]


SCHEDULER_LINE = "RuntimeError: NCCL communicator was aborted on rank 0."


def failed_after_ready_script() -> list[Event]:
    """The bring-up succeeds at 0:59; at 3:46 the decode's scheduler crashes: the outcome is told again, the steps
    stay as they went."""
    reason = f"after ready: scheduler crashed (TP0): {SCHEDULER_LINE}"
    header = "[2025-10-16 09:09:55 TP0] Scheduler hit an exception: Traceback (most recent call last):"
    crash = [LogRecord(header, LineKind.FAIL, T0 + 226, "c-decode-crash-0"),
             LogRecord(f"[2025-10-16 09:09:56 TP0] {SCHEDULER_LINE}", N, T0 + 227, "c-decode-crash-1"),
             LogRecord("sglang-dsv4-decode.service: Main process exited, code=exited, status=1/FAILURE",
                       LineKind.SYSTEM, T0 + 227, "c-decode-crash-2")]
    return [
        *ready_script(),
        LogLines("decode", tuple(crash), 226.0),
        StateChanged("decode", S.READY, S.FAILED, reason, header, 226.0),
        Notice("warning", f"router degraded: decode failed after it was ready ({reason})", "router", 226.0),
        Done(False, 1, {"prefill": 40.0, "router": 12.0}, {"decode": reason},
             ("sglang-dsv4-prefill", "sglang-dsv4-router"), 226.4, ready_at=59.0, failed_at=226.0),
    ]


def decode_failed_script() -> list[Event]:
    """Decode runs out of GPU memory while capturing CUDA graphs: the router is never started."""
    failing = [
        (31, "Capture cuda graph begin. This can take up to several minutes. avail mem=1.95 GB", N),
        (38, OOM_LINE, LineKind.FAIL),
        (38, "Received sigquit from a child proces. It usually means the child failed.", N),
        (39, "sglang-dsv4-decode.service: Main process exited, code=exited, status=1/FAILURE",
         LineKind.SYSTEM),
    ]
    return [
        *starting_script()[:-1],
        lines("decode", failing, 38.0),
        StateChanged("decode", S.WAITING, S.FAILED, "CUDA out of memory", sglang(38, OOM_LINE), 38.0),
        StateChanged("router", S.PENDING, S.BLOCKED, "decode failed", None, 38.0),
        StepChanged(Step.WAIT_READY, StepStatus.FAILED, "decode failed", elapsed=38.0),
        StepChanged(Step.START_ROUTER, StepStatus.SKIPPED, elapsed=38.0),
        StepChanged(Step.PROBE_ROUTER, StepStatus.SKIPPED, elapsed=38.0),
        StepChanged(Step.DONE, StepStatus.SKIPPED, elapsed=38.0),
        Done(False, 1, {}, {"decode": "CUDA out of memory"}, ("sglang-dsv4-prefill", "sglang-dsv4-decode"), 38.0,
             waiting=("prefill",), blocked={"router": "decode failed"}),
    ]


def _pd(name: str, role: str, gpus: tuple[int, ...], numa: int, port: int) -> ServiceInfo:
    return ServiceInfo(name, role, f"sglang-{name}", "gpu0", gpus, numa, port, (), 360.0)


def broken_pair_script() -> list[Event]:
    """2P2D: every server ready, the router's smoke passes, one pair never moves KV: the bring-up fails naming it."""
    backends = (_pd("prefill-0", "prefill", (0, 1), 0, 30000), _pd("prefill-1", "prefill", (2, 3), 0, 30010),
                _pd("decode-0", "decode", (4, 5), 1, 30002), _pd("decode-1", "decode", (6, 7), 1, 30012))
    router = ServiceInfo("router", "router", "sglang-router", "gpu0", (), None, 30001,
                         tuple(b.name for b in backends), 120.0)
    why = ("KV transfer failed: decode-1: KVTransferError: Could not fetch prefill parallel info from bootstrap_addr: "
           "10.0.0.1:8998")
    pairs = tuple(PairResult(p, d, (p, d) != ("prefill-0", "decode-1"),
                             why if (p, d) == ("prefill-0", "decode-1") else "4 tokens (finish length, no text)", 0.2)
                  for p in ("prefill-0", "prefill-1") for d in ("decode-0", "decode-1"))
    events: list[Event] = [PlanReady("dsv4-2p2d", (*backends, router), tuple(Step), config=CONFIG),
                           StepChanged(Step.PREFLIGHT, StepStatus.DONE, elapsed=1.0)]
    for backend in backends:
        events += [StateChanged(backend.name, S.PENDING, S.STARTING, elapsed=1.0),
                   StateChanged(backend.name, S.STARTING, S.WAITING, elapsed=2.0),
                   StateChanged(backend.name, S.WAITING, S.READY, "ready", None, 40.0, 39.0)]
    reason = f"pairs: decode-1 ✗ prefill-0: {why}"
    return [*events,
            StepChanged(Step.START_BACKENDS, StepStatus.DONE, elapsed=2.0),
            StepChanged(Step.WAIT_READY, StepStatus.DONE, elapsed=40.0),
            StateChanged("router", S.PENDING, S.STARTING, elapsed=40.0),
            StateChanged("router", S.STARTING, S.WAITING, elapsed=41.0),
            StepChanged(Step.START_ROUTER, StepStatus.DONE, elapsed=41.0),
            ProbeResult("router", "workers", True, "4 of 4 backends healthy", 0.001, 42.0),
            ProbeResult("router", "smoke", True, "4 tokens in 241 ms for a 1,034-token prompt (finish length, "
                                                 "'The quick brown fox' in content)", 0.241, 42.0),
            ProbeResult("router", "kv", True, "KV moved prefill→decode, 71 MB from prefill-1", None, 42.3),
            ProbeResult("router", "pairs", False, f"decode-1 ✗ prefill-0: {why}", None, 43.0),
            PairMatrix("router", pairs, 43.0),
            StateChanged("router", S.WAITING, S.FAILED, reason, None, 44.0),
            StepChanged(Step.PROBE_ROUTER, StepStatus.FAILED, elapsed=44.0),
            StepChanged(Step.DONE, StepStatus.FAILED, elapsed=44.0),
            Done(False, 1, {b.name: 39.0 for b in backends}, {"router": reason},
                 tuple(f"sglang-{b.name}" for b in (*backends, router)), 44.0)]


def fabric_refused_script() -> list[Event]:
    """The preflight refuses both servers on their host's fabric (a port down, a device missing) and warns of a
    NUMA split: nothing starts."""
    port = "prefill: mlx5_0 on gpu0 has no active port (port 1: DOWN): no KV moves over it"
    missing = ("decode: --disaggregation-ib-device names mlx5_3, which gpu0 does not have (it has mlx5_0, mlx5_1): "
               "Mooncake fails to register the KV cache with it, after the weights load")
    numa = ("decode: nvidia_peermem is not loaded on gpu0: without it the RDMA devices cannot reach GPU memory and "
            "Mooncake's registration fails (unless the kernel and driver give dma-buf); modprobe nvidia_peermem")
    unit = "its unit sglang-dsv4-{} on gpu0"
    where = "/sys/class/infiniband on gpu0"
    return [
        PLAN,
        StepChanged(Step.PREFLIGHT, StepStatus.RUNNING, elapsed=0.0),
        PreflightFinding("error", "fabric", "prefill", "gpu0", "IB port", ("mlx5_0", "port 1: DOWN"),
                         (unit.format("prefill"), where), port, 0.4),
        PreflightFinding("error", "fabric", "decode", "gpu0", "IB device", ("mlx5_3", "mlx5_0, mlx5_1"),
                         (unit.format("decode"), where), missing, 0.4),
        PreflightFinding("warning", "fabric", "decode", "gpu0", "nvidia_peermem", ("loaded", "not loaded"),
                         (unit.format("decode"), "/sys/module on gpu0"), numa, 0.4),
        StateChanged("prefill", S.PENDING, S.FAILED, port.removeprefix("prefill: "), None, 0.4),
        StateChanged("decode", S.PENDING, S.FAILED, missing.removeprefix("decode: "), None, 0.4),
        StateChanged("router", S.PENDING, S.BLOCKED, "the preflight refused the servers as they would run", None, 0.4),
        StepChanged(Step.PREFLIGHT, StepStatus.FAILED, elapsed=0.4),
        StepChanged(Step.DONE, StepStatus.FAILED, elapsed=0.4),
        Done(False, 1, {}, {"prefill": port.removeprefix("prefill: "), "decode": missing.removeprefix("decode: ")},
             (), 0.4),
    ]


HOSTILE_CONFIG = "/tmp/evil\x1b]52;c;cHduZWQ=\x07\u202e.yaml"
"""A config file named to write the clipboard and reverse the text after it, were its name drawn raw."""


def hostile_script() -> list[Event]:
    """A prefill journal full of escapes, markup and an absurdly long line, from a config with a hostile name."""
    records = tuple(LogRecord(text, N, T0 + 20 + i) for i, text in enumerate(HOSTILE_LINES))
    plan, *started = starting_script()[:-1]
    assert isinstance(plan, PlanReady)
    return [dataclasses.replace(plan, config=HOSTILE_CONFIG), *started, LogLines("prefill", records, 40.0)]



WIDE_DECODE = ServiceInfo("decode", "decode", "sglang-dsv4-decode", "gpu-a", (0, 1, 2, 3, 4, 5, 6, 7), 0, 30002, (),
                          900.0, "systemctl restart sglang-dsv4-decode", "systemctl stop sglang-dsv4-decode")
WIDE_RANK_1 = ServiceInfo("decode@1", "decode", "sglang-dsv4-decode", "gpu-b", (0, 1, 2, 3, 4, 5, 6, 7), 0, 30002, (),
                          900.0, "systemctl restart sglang-dsv4-decode", "systemctl stop sglang-dsv4-decode", rank=1,
                          server="decode")
WIDE_PREFILL = ServiceInfo("prefill", "prefill", "sglang-dsv4-prefill", "gpu-p", (0, 1, 2, 3, 4, 5, 6, 7), 0, 30000,
                           (), 900.0, "systemctl restart sglang-dsv4-prefill", "systemctl stop sglang-dsv4-prefill")
WIDE_PLAN = PlanReady("dsv4-wide", (WIDE_PREFILL, WIDE_DECODE, WIDE_RANK_1,
                                    ServiceInfo("router", "router", "sglang-dsv4-router", "gpu-p", (), None, 30001,
                                                ("prefill", "decode"), 120.0)), tuple(Step),
                      config="/etc/pdtui/dsv4-wide.yaml")
GLOO_LINE = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
             "[10.0.0.2]:50000")


def wide_stalled_script() -> list[Event]:
    """A decode over two nodes: rank 0 loads its weights while rank 1 has said nothing since its distributed init
    began, four minutes ago."""
    starts = [StateChanged(name, S.PENDING, S.STARTING, elapsed=1.0) for name in ("prefill", "decode", "decode@1")]
    waits = [StateChanged(name, S.STARTING, S.WAITING, elapsed=2.0) for name in ("prefill", "decode", "decode@1")]
    return [
        WIDE_PLAN,
        StepChanged(Step.PREFLIGHT, StepStatus.DONE, elapsed=1.0),
        StepChanged(Step.START_BACKENDS, StepStatus.RUNNING, elapsed=1.0),
        *starts, *waits,
        StepChanged(Step.START_BACKENDS, StepStatus.DONE, elapsed=2.0),
        PhaseStarted("decode", "distributed", 3.0, T0 + 3),
        PhaseStarted("decode@1", "distributed", 3.0, T0 + 3),
        lines("decode@1", [(3, "Init parallel begin.", N)], 3.0, " TP8"),
        lines("decode", [(3, "Init parallel begin.", N), (4, "Init parallel ends. elapsed=0.10 s", N)], 4.0),
        PhaseStarted("decode", "weights", 10.0, T0 + 10),
        lines("decode", BOOT[1:3], 30.0),
        lines("prefill", BOOT, 31.0),
        Notice("warning", "decode: rank 1 on gpu-b: no line for 4m in distributed init (since 0:03): it may be stuck; "
                          "not ready after 15m it fails", "decode@1", 243.0),
        StepChanged(Step.WAIT_READY, StepStatus.RUNNING, "prefill, decode loading", elapsed=245.0),
    ]


def wide_failed_script() -> list[Event]:
    """Rank 1 of the two-node decode runs out of GPU memory; rank 0 dies of its loss (gloo's peer closed) first, and
    the engine blames rank 1: the server failed as one, the router never started."""
    failing = [
        (38, OOM_LINE, LineKind.FAIL),
        (38, "Received sigquit from a child proces. It usually means the child failed.", N),
    ]
    return [
        *wide_stalled_script()[:-2],
        lines("decode@1", [(20, "Load weight begin. avail mem=137.34 GB", N), *failing], 38.0, " TP8"),
        lines("decode", [(38, GLOO_LINE, LineKind.FAIL)], 38.0),
        StateChanged("decode", S.WAITING, S.FAILED, "scheduler crashed (TP0): " + GLOO_LINE, None, 38.0),
        StateChanged("decode@1", S.WAITING, S.FAILED, "CUDA out of memory", sglang(38, OOM_LINE, " TP8"), 38.5),
        ServerFailed("decode", "decode@1", 38.5),
        Notice("error", "decode: rank 1 on gpu-b failed, and rank 0 on gpu-a with it; a retry restarts every rank",
               "decode", 38.5),
        StateChanged("router", S.PENDING, S.BLOCKED, "decode failed", None, 38.5),
        StepChanged(Step.WAIT_READY, StepStatus.FAILED, "decode failed", elapsed=38.5),
        StepChanged(Step.START_ROUTER, StepStatus.SKIPPED, elapsed=38.5),
        StepChanged(Step.PROBE_ROUTER, StepStatus.SKIPPED, elapsed=38.5),
        StepChanged(Step.DONE, StepStatus.SKIPPED, elapsed=38.5),
        Done(False, 1, {}, {"decode": "scheduler crashed (TP0): " + GLOO_LINE, "decode@1": "CUDA out of memory"},
             ("sglang-dsv4-prefill", "sglang-dsv4-decode on gpu-a"), 38.5, waiting=("prefill",),
             blocked={"router": "decode failed"}),
    ]
