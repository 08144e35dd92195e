"""A vLLM prefill against a decode, and the servers of one host against each other, as their command lines say
they will run: what would keep them from moving KV, found before the weights load.

vLLM's NIXL connector checks a pair late: on the decode's first request its handshake compares a hash of both
sides' vLLM release, model string, dtype, KV cache dtype, attention backend and KV layout, and a mismatch fails
that request (``NIXL compatibility hash mismatch``) while both servers stay healthy. The model is hashed as the
string each side was given: one path and one hub name of the same weights differ. Tensor-parallel sizes may
differ, and so may block sizes, so long as the prefill's is not the larger. And two servers of one host given one
NIXL side-channel port do not fail: the second hangs at start, never listening. So: a setting both sides give
and give differently is refused; one only one side gives, whose default the other resolves at start (``auto``), is
a warning.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from pdtui.config import ServiceConfig
from pdtui.servers import Mismatch, ServerCommand, TransferPath
from pdtui.servers.ports import SIDE_CHANNEL_ENV, SIDE_CHANNEL_FROM
from pdtui.servers.vllm.launch import CONNECTORS, KV_TRANSFER_CONFIG
from pdtui.support.argv import flag_values

AUTO = "auto"
BACKENDS = {connector: name for name, connector in CONNECTORS.items()}


@lru_cache(maxsize=4096)
def _read(words: tuple[str, ...]) -> tuple[Mapping[str, str], Mapping[str, Any] | None]:
    """A command line's flags, and its ``--kv-transfer-config`` (None: it gives none, or not as JSON)."""
    flags = flag_values(words)
    try:
        config = json.loads(flags[KV_TRANSFER_CONFIG]) if KV_TRANSFER_CONFIG in flags else None
    except ValueError:
        config = None
    return flags, config if isinstance(config, dict) else None


def _model(words: tuple[str, ...], flags: Mapping[str, str]) -> str | None:
    """``--model``, or ``vllm serve``'s positional model."""
    if "--model" in flags:
        return flags["--model"]
    for index, word in enumerate(words[:-2]):
        if word.rpartition("/")[2] == "vllm" and words[index + 1] == "serve":
            model = words[index + 2]
            return None if model.startswith("-") else model
    return None


def transfer_path(command: ServerCommand) -> TransferPath | None:
    """How a server moves KV as its command line says; None when it gives no KV connector."""
    config = _read(command.words)[1]
    if config is None:
        return None
    connector = str(config.get("kv_connector", ""))
    return TransferPath(BACKENDS.get(connector, connector), rdma=False)


def pair_mismatches(prefill: tuple[str, ServerCommand], decode: tuple[str, ServerCommand]) -> list[Mismatch]:
    """What keeps this prefill and this decode, as each will run, from moving KV between them (nothing is compared
    when a side gives no KV connector: a wrapper script may set its flags)."""
    (p, pc), (d, dc) = prefill, decode
    (pflags, pconfig), (dflags, dconfig) = _read(pc.words), _read(dc.words)
    if pconfig is None or dconfig is None:
        return []
    sources = (pc.source, dc.source)

    def told(level: str, setting: str, pv: str, dv: str, why: str) -> Mismatch:
        return Mismatch(level, "pair", (d, p), setting, (pv, dv), sources, f"{p} and {d} {why}")

    found = []
    pm, dm = _model(pc.words, pflags), _model(dc.words, dflags)
    if pm is not None and dm is not None and pm != dm:
        found.append(told("error", "model", pm, dm, f"serve different models: {p} {pm} ({pc.source}), {d} {dm} "
                                                   f"({dc.source}); vLLM hashes the model string, so the decode's "
                                                   "first request fails with 'NIXL compatibility hash mismatch'"))
    for flag, setting in (("--dtype", "dtype"), ("--kv-cache-dtype", "KV cache dtype")):
        pv, dv = pflags.get(flag, AUTO), dflags.get(flag, AUTO)
        if pv != dv:
            level = "warning" if AUTO in (pv, dv) else "error"
            found.append(told(level, setting, pv, dv, f"{'may ' if level == 'warning' else ''}disagree on {flag}: "
                                                      f"{p} runs {pv}, {d} {dv} ('auto' is the checkpoint's own); the "
                                                      "decode's first request fails with 'NIXL compatibility hash "
                                                      "mismatch' unless they resolve alike"))
    pk, dk = str(pconfig.get("kv_connector")), str(dconfig.get("kv_connector"))
    if pk != dk:
        found.append(told("error", "KV connector", pk, dk, f"run different KV connectors: {p} {pk}, {d} {dk}"))
    pb, db = _number(pflags.get("--block-size")), _number(dflags.get("--block-size"))
    if pb is not None and db is not None and pb > db:
        found.append(told("error", "block size", str(pb), str(db), f"cannot pair: {p}'s --block-size {pb} is larger "
                                                                   f"than {d}'s {db} (NIXL reads a prefill's blocks "
                                                                   "into the decode's only when they are not larger)"))
    return found


def _number(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def host_mismatches(servers: Sequence[tuple[ServiceConfig, ServerCommand]]) -> list[Mismatch]:
    """The NIXL servers of one host: each needs a side-channel port of its own (the second given one hangs)."""
    found: list[Mismatch] = []
    taken: dict[int, tuple[str, str]] = {}
    for cfg, command in servers:
        config = _read(command.words)[1]
        if config is None or config.get("kv_connector") != CONNECTORS["nixl"]:
            continue
        given = command.env.get(SIDE_CHANNEL_ENV, str(SIDE_CHANNEL_FROM))
        port = int(given) if given.isdigit() else SIDE_CHANNEL_FROM
        if port in taken:
            other, source = taken[port]
            found.append(Mismatch("error", "host", (cfg.name, other), "NIXL side channel", (str(port), str(port)),
                                  (command.source, source),
                                  f"{cfg.name} and {other} both take NIXL side-channel port {port} on {cfg.host} "
                                  f"({SIDE_CHANNEL_ENV}): the one that starts second hangs at start, never listening "
                                  "(vLLM does not exit on it)"))
        taken.setdefault(port, (cfg.name, command.source))
    return found


RUNNING = (("root", "model"), ("model", "served model name"))
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def running_mismatches(prefill: tuple[str, Mapping[str, Any]], decode: tuple[str, Mapping[str, Any]]) -> list[Mismatch]:
    """A ready prefill and decode as they say they run (``/v1/models``, ``/version``): another model, or another
    vLLM release (both in NIXL's compatibility hash), refuses the pair."""
    (p, pinfo), (d, dinfo) = prefill, decode
    sources = (f"{p}'s /v1/models", f"{d}'s /v1/models")
    found = []
    for key, setting in RUNNING:
        if key in pinfo and key in dinfo and pinfo[key] != dinfo[key]:
            pv, dv = str(pinfo[key]), str(dinfo[key])
            found.append(Mismatch("error", "running", (d, p), setting, (pv, dv), sources,
                                  f"{p} and {d} run different {setting}s: {p} {pv}, {d} {dv} (their /v1/models)"))
    pv, dv = str(pinfo.get("version", "")), str(dinfo.get("version", ""))
    if _VERSION.match(pv) and _VERSION.match(dv) and pv != dv:
        found.append(Mismatch("error", "running", (d, p), "vLLM version", (pv, dv),
                              (f"{p}'s /version", f"{d}'s /version"),
                              f"{p} and {d} run different vLLM releases: {p} {pv}, {d} {dv} (NIXL's compatibility "
                              "hash holds the release: their first transfer fails)"))
    return found
