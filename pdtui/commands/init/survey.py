"""What a machine already has for a PD deployment: its GPUs and the SGLang units systemd knows.

``pdtui init`` writes a config from this, so a newcomer starts from the units
and GPUs that are really there rather than from a sample. The GPUs are the
preflight's own inventory (:func:`pdtui.gpus.inventory.inventory`). The units are
every service systemd lists, in memory (``list-units --all``) or only on disk
(``list-unit-files``: a disabled unit nothing started is not in memory), read
with ``systemctl cat`` and the drift check's own readers, so what init writes is
what the preflight will compare. A unit counts when its name says ``sglang`` or
its command line runs SGLang's server or a PD router; what its command line says
(``--disaggregation-mode``, a router launcher) tells its role before its name
does, since that is what runs.

Nothing here raises for a missing tool: no nvidia-smi is no inventory, no
systemctl is no units and a reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pdtui.gpus.inventory import Inventory, inventory
from pdtui.hosts.base import Host, HostError, Result
from pdtui.servers import default_serving
from pdtui.support.argv import flag_value
from pdtui.targets.systemd.commands import Commands, ListedUnit, parse_cat, parse_list_unit_files, parse_list_units
from pdtui.targets.systemd.unit_drift import InstalledUnit, parse_installed

COMMAND_TIMEOUT = 30.0
ROUTER_MODULES = frozenset({"sglang_router.launch_router", "smg.launch_router"})
ROUTER_PROGRAMS = frozenset({"smg", "sglang-router"})
NAME_HINTS = ("prefill", "decode", "router")
UNLISTABLE_STATES = frozenset({"masked", "not-found", "bad"})


@dataclass(frozen=True, slots=True)
class FoundUnit:
    """An SGLang-looking unit and what its files say about it."""

    name: str                            # with its .service suffix
    role: str | None                     # prefill, decode, router; None when neither command nor name tells
    why: str                             # how the role (or the lack of one) was told, for the config's comment
    active: str = ""                     # list-units' ACTIVE column; "" when only its file is known
    server: bool = False                 # runs sglang.launch_server (or `sglang serve`)
    port: int | None = None              # its --port
    bootstrap_port: int | None = None    # its --disaggregation-bootstrap-port
    gpus: tuple[int, ...] | None = None  # CUDA_VISIBLE_DEVICES or --base-gpu-id with --tp
    numa: int | None = None              # the one NUMA node it binds to


@dataclass(frozen=True, slots=True)
class Survey:
    """One machine: its SGLang units, its GPUs (None: no nvidia-smi or no GPU) and why no unit was listed."""

    units: tuple[FoundUnit, ...]
    inventory: Inventory | None
    systemctl_error: str | None = None


async def survey(host: Host, commands: Mapping[str, Sequence[str]]) -> Survey:
    """Look at ``host`` through its ``commands`` (``systemctl``, ``nvidia-smi``), units and GPUs at once."""
    systemctl = Commands(systemctl_prefix=tuple(commands.get("systemctl", ("systemctl",))))
    (units, error), gpus = await asyncio.gather(
        find_units(host, systemctl), inventory(host, tuple(commands.get("nvidia-smi", ("nvidia-smi",)))))
    return Survey(tuple(units), gpus, error)


async def find_units(host: Host, systemctl: Commands) -> tuple[list[FoundUnit], str | None]:
    """The SGLang units of ``host``; with nothing found, why, when systemctl could not list any."""
    loaded, files = await asyncio.gather(_run(host, systemctl.list_units()), _run(host, systemctl.list_unit_files()))
    if isinstance(loaded, str) and isinstance(files, str):
        return [], loaded
    listed = _listed(loaded, files)
    if not listed:
        return [], None
    cat = await _run(host, systemctl.cat(list(listed)))
    texts = parse_cat(cat.stdout) if isinstance(cat, Result) else {}
    found = (classify(name, parse_installed(texts[name]) if texts.get(name) else None, active)
             for name, active in listed.items())
    return [unit for unit in found if unit is not None], None


def _listed(loaded: Result | str, files: Result | str) -> dict[str, str]:
    """Unit name -> its ACTIVE state ("" when only its file is listed), for every unit that has a file."""
    rows: list[ListedUnit] = []
    for result, parse in ((loaded, parse_list_units), (files, parse_list_unit_files)):
        if isinstance(result, Result):
            rows += parse(result.stdout)
    listed: dict[str, str] = {}
    for row in rows:
        if row.load in UNLISTABLE_STATES or row.file_state in UNLISTABLE_STATES or row.name.endswith("@.service"):
            continue
        listed[row.name] = listed.get(row.name) or row.active
    return listed


async def _run(host: Host, argv: list[str]) -> Result | str:
    """The finished command (even one that failed: ``cat`` fails for one missing unit among many), or why it
    could not run at all."""
    try:
        result = await host.run(argv, timeout=COMMAND_TIMEOUT)
    except HostError as exc:
        return str(exc)
    if not result.ok and not result.stdout.strip():
        return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"{argv[0]} exited {result.exit_status}"
    return result


def classify(name: str, unit: InstalledUnit | None, active: str = "") -> FoundUnit | None:
    """``name`` as an SGLang unit, or None when neither its name nor its command line is SGLang's."""
    words = unit.exec_start if unit else []
    serving = default_serving()
    server, router = serving.runs_server(words), runs_router(words)
    if "sglang" not in name.lower() and not server and not router:
        return None
    role, why = _role(name, words, router)
    gpus = unit.gpus(serving.command_flags)[0] if unit else None
    numa = unit.numa(serving.command_flags)[0] if unit else None
    return FoundUnit(name, role, why, active, server, _port(words, "--port"),
                     _port(words, "--disaggregation-bootstrap-port"),
                     tuple(gpus) if gpus is not None else None, int(numa) if numa and numa.isdigit() else None)


def runs_router(words: Sequence[str]) -> bool:
    """Whether a command line is a PD router: ``python -m sglang_router.launch_router``, ``smg``, ..."""
    return any(word in ROUTER_MODULES or word.rpartition("/")[2] in ROUTER_PROGRAMS for word in words)


def _role(name: str, words: list[str], router: bool) -> tuple[str | None, str]:
    """The unit's PD role and how it was told: its command line first, then its name."""
    mode = flag_value(words, "--disaggregation-mode")
    if mode in ("prefill", "decode"):
        return mode, f"runs --disaggregation-mode {mode}"
    if router or "--pd-disaggregation" in words:
        return "router", "runs a PD router"
    hint = next((hint for hint in NAME_HINTS if hint in name.lower()), None)
    if hint is not None:
        return hint, f"its name says {hint}"
    if default_serving().runs_server(words):
        return None, "runs SGLang without --disaggregation-mode (not PD)"
    return None, "its name says sglang, its command line no PD role"


def _port(words: list[str], flag: str) -> int | None:
    value = flag_value(words, flag)
    return int(value) if value is not None and value.isdigit() and 0 < int(value) < 65536 else None
