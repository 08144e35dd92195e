"""A :class:`~pdtui.commands.init.draft.Draft` as a commented ``pdtui.yaml``.

The file is a newcomer's first contact with the config, so every section says
what it is for and every key what it means, and the keys worth knowing that
were left at their defaults (``sudo``, ``commands``, ``bootstrap_port``,
``replaces``, a ``launch:`` block for a unit still to be made) are there,
commented out, ready to be switched on. Values are written as YAML flow
scalars (JSON strings where a plain one would not read back the same).
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable

import yaml

from pdtui.commands.init.draft import BACKENDS, DEFAULT_COMMANDS, Draft, ServiceDraft
from pdtui.commands.init.survey import FoundUnit
from pdtui.config.json_schema import modeline, shipped_schema

WIDTH = 100
COMMENT_COLUMN = 36
EXAMPLE_MODEL = "deepseek-ai/DeepSeek-V4-Flash"
_PLAIN = re.compile(r"[A-Za-z0-9_/.-][A-Za-z0-9_./@:=+-]*")

ROLE_TEXT = {
    "prefill": "runs each prompt, hands its KV cache to decode",
    "decode": "generates the tokens from prefill's KV cache",
    "router": "the entry point: each request to a prefill and a decode",
}
PORT_TEXT = {
    "prefill": "its HTTP port (SGLang's --port), for /health",
    "decode": "its HTTP port (SGLang's --port), for /health",
    "router": "where clients send requests (OpenAI-compatible API)",
}
TIMEOUT = {"prefill": "6m", "decode": "6m", "router": "2m"}


def render(draft: Draft, path: str = "pdtui.yaml") -> str:
    """The config text; ``path`` is how the next-step commands in its header name it."""
    sections = [_header(path), [f"name: {_scalar(draft.name)}{_pad(f'name: {draft.name}')}# shown in the title"],
                _host(draft), _facts(draft), _services(draft, path)]
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"


# --------------------------------------------------------------------------- pieces

def _header(path: str) -> list[str]:
    """The file's opening: the schema it is written against (for the editor), what it is, and what to run next."""
    check, up = f"pdtui check {path} --probe", f"pdtui up {path}"
    width = max(len(check), len(up)) + 3
    return [modeline(shipped_schema().as_uri()), *_comment(
        "This machine's prefill/decode (PD) disaggregated SGLang deployment, written by `pdtui init`.",
        "",
        "pdtui brings up three systemd units: the prefill and the decode server side by side, then, once both are "
        "truly ready (their ready log line, /health answering 200, no failure line), the router in front of them, "
        "proved with one tiny generation through it. Every key is described in the Config section of pdtui's README; "
        "the first line names the file's JSON Schema (installed with pdtui), so an editor with a YAML language server "
        "completes and checks it as you type.",
        "", "Next:"),
        f"#   {check.ljust(width)}checks this machine against this file; starts nothing",
        f"#   {up.ljust(width)}the bring-up"]


def _host(draft: Draft) -> list[str]:
    lines = [*_comment("hosts: the machines the services run on, each under a name of your choice."), "hosts:",
             f"  {draft.host}:",
             _key(2, "local", "true", "this machine, no SSH (a remote one has address: HOST)"),
             _key(2, "sudo", "true", "systemctl, journalctl as `sudo -n ...` (not root)", off=True)]
    if not draft.commands:
        lines.append(_key(2, "commands", "", "the tools, when not on PATH by these names", off=True))
        lines += [_key(3, tool, _scalar(argv[0]), off=True, at=2) for tool, argv in DEFAULT_COMMANDS.items()]
        return lines
    lines.append(_key(2, "commands", "", "how the tools are run here (as pdtui init ran them)"))
    for tool, argv in DEFAULT_COMMANDS.items():
        wrapped = draft.commands.get(tool)
        lines.append(_key(3, tool, _flow(wrapped) if wrapped else _scalar(argv[0]), off=wrapped is None))
    return lines


def _facts(draft: Draft) -> list[str]:
    """What was found on the machine: its GPUs, its SGLang units, and what the rest of the file made of them."""
    found = [svc.role for svc in draft.services if svc.found]
    if draft.systemctl_error:
        said = [f"Units: systemctl could not list the units ({draft.systemctl_error}), so none were looked for: "
                "the unit names below are defaults."]
    elif found:
        missing = [svc.role for svc in draft.services if not svc.found]
        many = len(found) > 1
        said = [f"Units: the {_and(found)} unit{'s' if many else ''} below {'are' if many else 'is'} installed here"
                + (f"; {_and(missing)} {'have' if len(missing) > 1 else 'has'} a default unit name, a unit to be "
                   "created." if missing else ".")]
    else:
        said = ["Units: systemd knows no SGLang unit here: the unit names below are defaults, to be created."]
    said += [f"Also found, not used: {unit.name} ({_found(unit)})." for unit in draft.others]
    if draft.replaces:
        said.append(f"{', '.join(draft.replaces)} run{'s' if len(draft.replaces) == 1 else ''} SGLang without a PD "
                    "role: if it holds these GPUs, list it under prefill's `replaces:` (stopped and disabled first).")
    return _comment(f"GPUs: {' '.join(draft.gpu_summary)}", "", *said)


def _services(draft: Draft, path: str) -> list[str]:
    lines = [*_comment("services: the systemd units pdtui starts, each under a name of your choice, with its role "
                       "(prefill, decode, router or other): prefill and decode first, the router once both are "
                       "ready."), "services:"]
    for index, svc in enumerate(draft.services):
        if index:
            lines.append("")
        lines += _service(draft, svc, path)
    return lines


def _service(draft: Draft, svc: ServiceDraft, path: str) -> list[str]:
    role = svc.role
    lines = [f"  {role}:", *_comment(*_notes(svc, path), indent=2),
             _key(2, "host", _scalar(draft.host), "one of hosts:"),
             _key(2, "unit", _scalar(svc.unit), 'its systemd unit (".service" optional)'),
             _key(2, "role", role, ROLE_TEXT[role])]
    if role in BACKENDS:
        lines += _placement(svc, draft.placeholder_gpus)
    lines.append(_key(2, "port", str(svc.port), PORT_TEXT[role]))
    if role == "prefill":
        where = "where decode fetches KV (default: /server_info's, else 8998)"
        lines.append(_key(2, "bootstrap_port", str(svc.bootstrap_port or 8998), where, off=svc.bootstrap_port is None))
        lines.append(_key(2, "replaces", _flow(draft.replaces or ("sglang-old",)),
                          "units stopped and disabled first (an old server)", off=True))
    if role == "router":
        lines.append(_key(2, "after", _flow(BACKENDS), "started only once these are ready"))
    lines.append(_key(2, "timeout", TIMEOUT[role], "how long it may take to be ready"))
    return lines + ([] if svc.found else _launch(role))


def _placement(svc: ServiceDraft, placeholder: bool) -> list[str]:
    if svc.found is not None and svc.found.gpus == svc.gpus:
        said = "the GPUs its unit runs on"
    else:
        said = "GPU indexes as nvidia-smi numbers them" + (" (an example)" if placeholder else "")
    lines = [_key(2, "gpus", _flow(svc.gpus), said, off=not svc.gpus)]
    if svc.numa is not None:
        lines.append(_key(2, "numa", str(svc.numa), "these GPUs' NUMA node (for CPUs and memory)"))
    else:
        lines.append(_key(2, "numa", "0", "these GPUs' NUMA node: unknown here", off=True))
    return lines


def _launch(role: str) -> list[str]:
    """A commented ``launch:`` block: uncommented (and the model set), ``pdtui units --install`` writes the unit."""
    lines = [_key(2, "launch", "", "what `pdtui units` puts in the unit it makes", off=True)]
    if role == "router":
        return lines + [_key(3, "package", "sglang-router", "the router: sglang-router, or smg", off=True, at=2),
                        _key(3, "policy", "cache_aware", "how it picks a worker for each request", off=True, at=2)]
    return lines + [_key(3, "model", EXAMPLE_MODEL, "the model: a path or Hugging Face name", off=True, at=2),
                    _key(3, "transfer_backend", "mooncake", "how KV moves: mooncake, nixl, ...", off=True, at=2),
                    _key(3, "args", "[--trust-remote-code]", "more SGLang flags", off=True, at=2)]


def _notes(svc: ServiceDraft, path: str) -> list[str]:
    if svc.found is None:
        notes = [f"No {svc.role} unit was found on this machine: create {svc.unit}.service, e.g. uncomment the "
                 f"`launch:` block below, set the model, and run `pdtui units {path} --install` (it writes the unit)."]
    else:
        notes = [f"Found: {svc.found.name} ({_found(svc.found)})."]
        if svc.role in BACKENDS and svc.found.gpus is None:
            notes.append("Its unit does not say its GPUs (no CUDA_VISIBLE_DEVICES, no --base-gpu-id): "
                         "these are the usual split.")
    return [*notes, *svc.notes]


def _found(unit: FoundUnit) -> str:
    state = {"active": "active now", "": "inactive"}.get(unit.active, unit.active)
    return f"{unit.why}; {state}"


# --------------------------------------------------------------------------- lines

def _key(depth: int, key: str, value: str, comment: str = "", *, off: bool = False, at: int | None = None) -> str:
    """``key: value`` at ``depth`` (two spaces each) with its comment aligned.

    ``off`` comments the key out with its ``#`` at depth ``at`` (its own by
    default; a commented-out parent's for its children), so deleting that one
    ``# `` switches the key on at the right indentation.
    """
    if off:
        hashed = depth if at is None else at
        text = f"{'  ' * hashed}# {'  ' * (depth - hashed)}{key}:"
    else:
        text = f"{'  ' * depth}{key}:"
    text += f" {value}" if value else ""
    return f"{text}{_pad(text)}# {comment}" if comment else text


def _pad(text: str) -> str:
    return " " * max(1, COMMENT_COLUMN - len(text))


def _comment(*paragraphs: str, indent: int = 0) -> list[str]:
    """Paragraphs as ``#`` lines wrapped to WIDTH; an empty one is a bare ``#``."""
    prefix = "  " * indent + "# "
    lines = []
    for paragraph in paragraphs:
        wrapped = textwrap.wrap(paragraph, WIDTH - len(prefix), break_on_hyphens=False, break_long_words=False)
        lines += [prefix + line for line in wrapped] or [prefix.rstrip()]
    return lines


def _scalar(value: str) -> str:
    """A string as YAML reads it back unchanged, as a value and in a flow list: plain when it can be, else JSON."""
    if _PLAIN.fullmatch(value) and _reads_back(value):
        return value
    return json.dumps(value)


def _reads_back(value: str) -> bool:
    try:
        return yaml.safe_load(f"k: {value}") == {"k": value} and yaml.safe_load(f"[{value}]") == [value]
    except yaml.YAMLError:
        return False


def _and(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _flow(values: Iterable[object]) -> str:
    """``[a, b]``: numbers as they are, strings as :func:`_scalar` writes them."""
    return "[" + ", ".join(str(v) if isinstance(v, int) else _scalar(str(v)) for v in values) + "]"
