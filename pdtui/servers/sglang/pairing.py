"""A prefill against a decode, and the servers of one host against each other, as their command lines say they
will run: what would keep them from moving KV, found before minutes of weight loading.

SGLang itself compares little, and late (read from the 0.5.23 wheel; 0.4.x compared nothing):
the decode asks the prefill's bootstrap server for its layout on its *first* request, and
raises ``Page size mismatch`` or ``KV cache dtype mismatch`` then (a plain string
comparison of the two ``--kv-cache-dtype`` values: ``bf16`` against ``bfloat16`` fails),
which its scheduler reports as ``Scheduler hit an exception``. The model, its revision
and the transfer backend are never compared: a pair that disagrees on them loads for
minutes and fails, or moves KV of the wrong shape. Attention TP sizes may differ (an MLA
model's decode reads one prefill rank; another model's is sliced by heads, "Performance is
NOT guaranteed"); a decode's pipeline must have the prefill's stages or one, and a decode
never runs context parallelism. ``--disaggregation-ib-device`` is each side's own choice
(each validates its names against /sys/class/infiniband; unset, Mooncake finds its own).

So: a setting both sides give and give differently is refused, as is one whose default
on the other side surely differs; one that only one side gives, whose default the other
resolves at start (page size from its attention backend, ``auto`` KV dtype from its
checkpoint), is a warning. docs/preflight.md says why each is what it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from pdtui.config import DEFAULT_BOOTSTRAP_PORT, ServiceConfig
from pdtui.servers import Mismatch, ServerCommand, TransferPath
from pdtui.support.argv import flag_values

DEFAULT_BACKEND = "mooncake"
DEFAULT_KV_DTYPE = "auto"
RDMA_BACKENDS = ("mooncake",)       # register the KV cache with RDMA devices (mooncake_tcp, nixl over TCP: not)
DP_ATTENTION_PORTS = (*range(1, 7), 13)    # with attention DP: the rendezvous port + these (tokenizer ... handshake)


class Side:
    """One server as its command line says it will run: its flags read once (a pair compares a score of them, and a
    fleet's preflight compares every prefill with every decode)."""

    __slots__ = ("command", "flags", "given", "name")

    def __init__(self, name: str, command: ServerCommand) -> None:
        self.name = name
        self.command = command
        self.flags, self.given = _flags(command.words)

    @classmethod
    def of(cls, words: tuple[str, ...]) -> Side:
        """A command line's words alone: what is read once per command line, whichever server runs it."""
        return cls("", ServerCommand(words, {}, ""))

    def flag(self, *names: str) -> str | None:
        flags = self.flags
        for name in names:
            if (value := flags.get(name)) is not None:
                return value
        return None

    def has(self, name: str) -> bool:
        """Whether the flag is given, with a value or as a switch."""
        return name in self.given

    def number(self, *names: str, default: int = 1) -> int:
        value = self.flag(*names)
        return int(value) if value is not None and value.isdigit() else default

    @property
    def attn_dp(self) -> int:
        """Its attention DP size: ``--attn-dp-size``, or (before 0.5.23's spelling) ``--dp-size`` with
        ``--enable-dp-attention``."""
        if (value := self.flag("--attn-dp-size")) is not None and value.isdigit():
            return int(value)
        return self.number("--dp-size", "--dp") if self.has("--enable-dp-attention") else 1

    @property
    def attn_cp(self) -> int:
        return self.number("--attn-cp-size")


@lru_cache(maxsize=4096)
def _flags(words: tuple[str, ...]) -> tuple[Mapping[str, str], frozenset[str]]:
    """A command line's flags with their values, and the names of all it gives (switches too): read once however
    many pairs it is in (never changed: shared)."""
    return flag_values(words), frozenset(word.partition("=")[0] for word in words if word.startswith("--"))


def transfer_path(command: ServerCommand) -> TransferPath | None:
    """How a server moves KV as its command line says; None when it is no PD server of SGLang's own command line
    (a wrapper script sets its flags itself)."""
    flags = _flags(command.words)[0]
    if flags.get("--disaggregation-mode") is None:
        return None
    backend = flags.get("--disaggregation-transfer-backend") or DEFAULT_BACKEND
    devices = tuple(d for d in (flags.get("--disaggregation-ib-device") or "").split(",") if d)
    return TransferPath(backend, backend in RDMA_BACKENDS, devices)


def pair_mismatches(prefill: tuple[str, ServerCommand], decode: tuple[str, ServerCommand]) -> list[Mismatch]:
    """What keeps this prefill and this decode, as each will run, from moving KV between them. A side whose
    command line does not say its disaggregation mode is a wrapper (a script that sets the flags itself): its
    defaults cannot be read, so nothing is compared."""
    compared, against = _compared(prefill[1].words), _compared(decode[1].words)
    if compared is None or against is None:
        return []
    if compared == against and against[-1] == 1:
        return []           # alike in all a pair compares, the decode without context parallelism: a fleet's usual
    p, d = Side(*prefill), Side(*decode)
    return [
        *_same(p, d, "model", ("--model-path", "--model")),
        *_same(p, d, "revision", ("--revision",), one_side="runs the model's default branch"),
        *_backend(p, d),
        *_same(p, d, "page size", ("--page-size",),
               one_side="the other resolves its own at start (from its attention backend); the decode's first "
                        "request fails with 'Page size mismatch' if they differ"),
        *_kv_dtype(p, d),
        *_ib_device(p, d),
        *_layout(p, d),
    ]


@lru_cache(maxsize=4096)
def _compared(words: tuple[str, ...]) -> tuple[str | int | bool | None, ...] | None:
    """All a pair compares of one command line, its attention CP size last (the decode's alone must be 1); None when
    it does not say its disaggregation mode. Read once a command line: a fleet's preflight compares every prefill
    with every decode, and two sides alike in all of it have nothing to tell. A rule of :func:`pair_mismatches`
    that reads another flag reads it here too, or pairs alike in the rest would never reach it."""
    side = Side.of(words)
    if not side.has("--disaggregation-mode"):
        return None
    return (side.flag("--model-path", "--model"), side.flag("--revision"),
            side.flag("--disaggregation-transfer-backend") or DEFAULT_BACKEND, side.flag("--page-size"),
            side.flag("--kv-cache-dtype") or DEFAULT_KV_DTYPE, side.flag("--disaggregation-ib-device") is None,
            side.number("--pp-size", "--pp"), side.attn_cp)


def _values(p: Side, d: Side, names: tuple[str, ...]) -> tuple[str | None, str | None]:
    return p.flag(*names), d.flag(*names)


def _mismatch(level: str, p: Side, d: Side, setting: str, values: tuple[str, str], text: str) -> Mismatch:
    return Mismatch(level, "pair", (d.name, p.name), setting, values, (p.command.source, d.command.source),
                    f"{p.name} and {d.name} {text}")


def _both(p: Side, d: Side, flag: str, pv: str, dv: str) -> str:
    return (f"disagree on {flag}: {p.name} runs {pv} ({p.command.source}), {d.name} runs {dv} "
            f"({d.command.source})")


def _same(p: Side, d: Side, setting: str, names: tuple[str, ...], one_side: str | None = None) -> list[Mismatch]:
    """A setting both must run alike: refused when both give it differently; one that only one side gives is a
    warning saying why (``one_side``), or not told when the other's value cannot be known from its command line
    (a wrapper script may set it)."""
    pv, dv = _values(p, d, names)
    if pv == dv:
        return []
    flag = names[0]
    if pv is not None and dv is not None:
        return [_mismatch("error", p, d, setting, (pv, dv), _both(p, d, flag, pv, dv))]
    if one_side is None:
        return []
    given, side = (pv, p) if pv is not None else (dv, d)
    other = d if side is p else p
    return [_mismatch("warning", p, d, setting, (pv or "unset", dv or "unset"),
                      f"may disagree on {flag}: only {side.name} gives it ({given}, {side.command.source}); "
                      f"{other.name} does not, and {one_side}")]


def _backend(p: Side, d: Side) -> list[Mismatch]:
    """The transfer backend: never compared by SGLang; ``mooncake_tcp`` is Mooncake forced onto TCP."""
    names = ("--disaggregation-transfer-backend",)
    pv, dv = (v or DEFAULT_BACKEND for v in _values(p, d, names))
    if pv == dv:
        return []
    if {pv, dv} == {"mooncake", "mooncake_tcp"}:
        return [_mismatch("warning", p, d, "transfer backend", (pv, dv),
                          f"may disagree on {names[0]}: {p.name} runs {pv}, {d.name} {dv} (Mooncake over TCP on one "
                          f"side only: both sides must reach each other the same way)")]
    return [_mismatch("error", p, d, "transfer backend", (pv, dv), _both(p, d, names[0], pv, dv)
                      + ": SGLang never compares them, the first transfer fails")]


def _kv_dtype(p: Side, d: Side) -> list[Mismatch]:
    """SGLang compares the two strings as given: ``bf16`` against ``bfloat16`` is a mismatch too. ``auto`` may
    resolve to ``fp8_e4m3`` (an FP8 checkpoint): against an explicit value, a warning."""
    pv, dv = (v or DEFAULT_KV_DTYPE for v in _values(p, d, ("--kv-cache-dtype",)))
    if pv == dv:
        return []
    if DEFAULT_KV_DTYPE in (pv, dv):
        return [_mismatch("warning", p, d, "KV cache dtype", (pv, dv),
                          f"may disagree on --kv-cache-dtype: {p.name} runs {pv}, {d.name} {dv} ('auto' is the "
                          f"checkpoint's own; SGLang compares the two strings on the first request and fails it with "
                          f"'KV cache dtype mismatch' unless they are equal)")]
    return [_mismatch("error", p, d, "KV cache dtype", (pv, dv), _both(p, d, "--kv-cache-dtype", pv, dv)
                      + " (SGLang compares the strings: the decode's first request fails with 'KV cache dtype "
                        "mismatch')")]


def _ib_device(p: Side, d: Side) -> list[Mismatch]:
    pv, dv = _values(p, d, ("--disaggregation-ib-device",))
    if (pv is None) == (dv is None):
        return []
    side, value = (p, pv) if pv is not None else (d, dv)
    other = d if side is p else p
    return [_mismatch("warning", p, d, "IB device", (pv or "unset", dv or "unset"),
                      f"name their RDMA devices on one side only: {side.name} uses {value}, {other.name} lets "
                      f"Mooncake pick its own (it works when the devices it picks reach {side.name}'s)")]


def _layout(p: Side, d: Side) -> list[Mismatch]:
    """What SGLang's rank mapping cannot pair: a decode with context parallelism, a decode pipeline that is neither
    the prefill's nor one stage. Attention TP sizes that differ are paired, and not told: a model with MLA (the
    common PD case) reads one prefill rank; SGLang warns itself when one without MLA is sliced by heads."""
    found = []
    if d.attn_cp > 1:
        found.append(_mismatch("error", p, d, "attention CP", (str(p.attn_cp), str(d.attn_cp)),
                               f"cannot pair: {d.name} runs --attn-cp-size {d.attn_cp} ({d.command.source}); SGLang's "
                               f"decode requires context parallelism 1"))
    pp, dp = p.number("--pp-size", "--pp"), d.number("--pp-size", "--pp")
    if dp not in (pp, 1):
        found.append(_mismatch("error", p, d, "pipeline", (str(pp), str(dp)),
                               f"cannot pair: {d.name} runs --pp-size {dp}, {p.name} {pp}; SGLang requires the decode's "
                               f"pipeline size to be the prefill's or 1"))
    return found


# --------------------------------------------------------------------------- one host's servers

_ADDRESS = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:]+)):(?P<port>\d+)$")


def host_mismatches(servers: Sequence[tuple[ServiceConfig, ServerCommand]]) -> list[Mismatch]:
    """The servers of one host: rendezvous ports (``--dist-init-addr``, and the ports attention DP takes above it)
    colliding with each other or with a server's own ports; ``--tp`` against the GPUs its unit gets."""
    found: list[Mismatch] = []
    taken: dict[int, tuple[str, str, str]] = {}      # port -> (service, what takes it, source)
    for cfg, command in servers:
        for port, what in _ports(cfg.role, command.words):
            if port in taken and taken[port][0] != cfg.name:
                other, other_what, other_source = taken[port]
                found.append(Mismatch("error", "host", (cfg.name, other), "port", (str(port), str(port)),
                                      (command.source, other_source),
                                      f"{cfg.name} and {other} both take port {port} on {cfg.host}: {cfg.name}'s "
                                      f"{what} ({command.source}) and {other}'s {other_what} ({other_source})"))
            taken.setdefault(port, (cfg.name, what, command.source))
        found += _gpu_count(cfg, command) + _fake_prefill(cfg, command)
    return found


@lru_cache(maxsize=4096)
def _ports(role: str, words: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """The ports a server binds on its host, and what each is for: read once per command line (a fleet's hosts run
    the same ones)."""
    side = Side.of(words)
    ports = []
    if (port := side.flag("--port")) is not None and port.isdigit():
        ports.append((int(port), "--port"))
    if role == "prefill" and _rank0_here(side):       # a rank >= 1 registers with rank 0's
        boot = side.flag("--disaggregation-bootstrap-port") or str(DEFAULT_BOOTSTRAP_PORT)
        if boot.isdigit():
            ports.append((int(boot), "bootstrap server (--disaggregation-bootstrap-port)"))
    address = side.flag("--dist-init-addr", "--nccl-init-addr")
    match = _ADDRESS.match(address or "")
    if match and _rank0_here(side):
        base = int(match["port"])
        ports.append((base, f"--dist-init-addr {address}"))
        if side.attn_dp > 1:
            ports += [(base + n, f"--dist-init-addr {address} + {n} (attention DP)") for n in DP_ATTENTION_PORTS]
    return tuple(ports)


def _rank0_here(side: Side) -> bool:
    """Whether this server is its group's first node (the one that binds the rendezvous port)."""
    return side.number("--node-rank", default=0) == 0


def _gpu_count(cfg: ServiceConfig, command: ServerCommand) -> list[Mismatch]:
    """``--tp`` (times plain DP, over the nodes) against the GPUs ``CUDA_VISIBLE_DEVICES`` gives its unit."""
    visible = _visible(command)
    if visible is None:
        return []
    needed, tp, plain_dp = _gpus_needed(command.words)
    if needed <= visible:
        return []
    return [Mismatch("error", "host", (cfg.name,), "GPUs", (str(needed), str(visible)), (command.source,),
                     f"{cfg.name} needs {needed} GPUs on {cfg.host} (--tp {tp}"
                     + (f", --dp-size {plain_dp}" if plain_dp > 1 else "") + f") but CUDA_VISIBLE_DEVICES gives it "
                     f"{visible} ({command.source})")]


def _fake_prefill(cfg: ServiceConfig, command: ServerCommand) -> list[Mismatch]:
    """``fake`` moves no KV: SGLang takes it on a decode alone (a decode-only benchmark) and refuses it on a prefill
    at start (``AssertionError: Prefill server does not support 'fake' as the transfer backend``)."""
    if cfg.role != "prefill" or Side.of(command.words).flag("--disaggregation-transfer-backend") != "fake":
        return []
    return [Mismatch("error", "host", (cfg.name,), "transfer backend", ("fake", "fake"), (command.source,),
                     f"{cfg.name} runs --disaggregation-transfer-backend fake ({command.source}): SGLang refuses it on "
                     f"a prefill (fake moves no KV; it is for a decode alone)")]


@lru_cache(maxsize=4096)
def _gpus_needed(words: tuple[str, ...]) -> tuple[int, int, int]:
    """The GPUs a server's command line needs on its node, its TP size and its plain DP size."""
    side = Side.of(words)
    plain_dp = 1 if side.attn_dp > 1 else side.number("--dp-size", "--dp")
    tp = side.number("--tp-size", "--tp")
    return max(1, tp * plain_dp // max(1, side.number("--nnodes"))), tp, plain_dp


def _visible(command: ServerCommand) -> int | None:
    """How many GPUs ``CUDA_VISIBLE_DEVICES`` gives (its environment, or an ``env VAR=...`` word), None unset."""
    value = _visible_word(command.words)
    if value is None:
        value = command.env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return len([part for part in value.split(",") if part.strip()])


@lru_cache(maxsize=4096)
def _visible_word(words: tuple[str, ...]) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` as an ``env VAR=...`` word sets it (the last such word), else None."""
    value = None
    for word in words:
        if word.startswith("CUDA_VISIBLE_DEVICES="):
            value = word.partition("=")[2]
    return value


# --------------------------------------------------------------------------- once up: as they really run

RUNNING = (("model_path", "model"), ("revision", "revision"), ("disaggregation_transfer_backend", "transfer backend"),
           ("page_size", "page size"), ("kv_cache_dtype", "KV cache dtype"))
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def running_mismatches(prefill: tuple[str, Mapping[str, Any]], decode: tuple[str, Mapping[str, Any]]) -> list[Mismatch]:
    """A ready prefill and decode as their ``/server_info`` says they run (the values SGLang resolved at start),
    and their SGLang releases: another minor release refuses the pair, another patch is a warning. A key one side
    does not report (an older release) is not compared."""
    (p, pinfo), (d, dinfo) = prefill, decode
    sources = (f"{p}'s /server_info", f"{d}'s /server_info")
    found = []
    for key, setting in RUNNING:
        if key not in pinfo or key not in dinfo or pinfo[key] == dinfo[key]:
            continue
        pv, dv = str(pinfo[key]), str(dinfo[key])
        level, why = _running_level(key, pinfo[key], dinfo[key])
        found.append(Mismatch(level, "running", (d, p), setting, (pv, dv), sources,
                              f"{p} and {d} run different {setting}s: {p} {pv}, {d} {dv} (their /server_info){why}"))
    return found + _versions(p, d, pinfo.get("version"), dinfo.get("version"), sources)


def _running_level(key: str, pv: Any, dv: Any) -> tuple[str, str]:
    """As before start: a revision one side leaves unset (None: the model's default branch, which may be the other's)
    and Mooncake over TCP on one side only are warnings; every other difference refuses."""
    if key == "revision" and None in (pv, dv):
        return "warning", "; the one without runs the model's default branch"
    if key == "disaggregation_transfer_backend" and {pv, dv} == {"mooncake", "mooncake_tcp"}:
        return "warning", "; Mooncake over TCP on one side only: both sides must reach each other the same way"
    return "error", ""


def _versions(p: str, d: str, pv: Any, dv: Any, sources: tuple[str, str]) -> list[Mismatch]:
    pm, dm = _VERSION.match(str(pv or "")), _VERSION.match(str(dv or ""))
    if pm is None or dm is None or pm.groups() == dm.groups():
        return []
    level = "error" if pm.groups()[:2] != dm.groups()[:2] else "warning"
    words = "minor releases" if level == "error" else "patch releases"
    return [Mismatch(level, "running", (d, p), "SGLang version", (str(pv), str(dv)), sources,
                     f"{p} and {d} run different SGLang {words}: {p} {pv}, {d} {dv}")]
