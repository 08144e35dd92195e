"""A service's ``launch:`` block: what its systemd unit runs (see pdtui/targets/systemd/unit_files.py).

One model holds the keys of both kinds of launch; which keys a service may set
depends on its role (an SGLang server or a router), checked by
:func:`check_launch_keys` so an error points at the key that does not belong.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict

from pdtui.config.errors import did_you_mean, fail, show
from pdtui.config.fields import Address, Check, Port, integer, printable
from pdtui.config.secrets import secret_args, secret_name

TransferBackend = Literal["mooncake", "nixl", "ascend", "mori", "mooncake_tcp", "fake"]
RouterPackage = Literal["sglang-router", "smg"]
TRANSFER_BACKENDS: tuple[str, ...] = get_args(TransferBackend)
ROUTER_PACKAGES: tuple[str, ...] = get_args(RouterPackage)
DEFAULT_ROUTER_PACKAGE = "sglang-router"
# Each router package's Python package (its launcher is PACKAGE.launch_router, taking the same PD flags).
ROUTER_PYTHON_PACKAGES = {"sglang-router": "sglang_router", "smg": "smg"}

SERVER_KEYS = frozenset({"model", "tp", "transfer_backend", "bootstrap_port", "ib_device", "host", "python", "command",
                         "args", "env", "secret_env", "dist_port", "dist_addr"})
RENDEZVOUS_KEYS = ("dist_port", "dist_addr")      # a server over several nodes' only
ROUTER_KEYS = frozenset({"package", "policy", "prometheus_port", "host", "python", "command", "args", "env",
                         "secret_env"})
# What each serving engine's launch takes: vLLM's server has no bootstrap server, InfiniBand device or rendezvous
# here, and its router is vllm-router alone.
ENGINE_SERVER_KEYS = {"sglang": SERVER_KEYS,
                      "vllm": frozenset({"model", "tp", "transfer_backend", "host", "python", "command", "args", "env",
                                         "secret_env"})}
ENGINE_ROUTER_KEYS = {"sglang": ROUTER_KEYS, "vllm": ROUTER_KEYS - {"package"}}
ENGINE_TRANSFER_BACKENDS = {"sglang": TRANSFER_BACKENDS, "vllm": ("nixl", "mooncake")}
ENGINE_TITLES = {"sglang": "SGLang", "vllm": "vLLM"}


def _choice(choices: tuple[str, ...], what: str) -> Check:
    def check(value: Any) -> str:
        if value not in choices:
            raise fail(f"expected {what}: one of {', '.join(choices)}, got {show(value)}{did_you_mean(value, choices)}")
        return value
    return Check(check, accepts={"enum": list(choices), "description": what})


def _shown(text: str, secret: bool) -> str:
    """A refused text as an error quotes it; a secret's (a token pasted with its line's end) only by where it breaks:
    an error reaches terminals and CI logs."""
    if not secret:
        return show(text)
    at = next(i for i, c in enumerate(text) if not c.isprintable())
    what = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(text[at], f"U+{ord(text[at]):04X}")
    return f"a secret's value (not shown) with {what} at its character {at + 1}"


def _words(value: Any) -> tuple[str, ...]:
    """A command: a string split like a shell would, or a non-empty list of strings; printable text only (a newline
    would end a generated unit's line, and what follows it would be a directive of its own)."""
    expected = "a command: a string or a non-empty list of strings"
    if isinstance(value, str):
        if not value.isprintable():
            secret = any(secret_name(word) for word in value.split() if word.startswith("-"))
            raise fail(f"expected {expected} of printable text, got {_shown(value, secret)}")
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise fail(f"expected {expected}, got {show(value)} ({exc})") from None
    elif isinstance(value, (list, tuple)):
        for index, word in enumerate(value):
            if not isinstance(word, str) or not word:
                raise fail(f"expected {expected}, got {show(word)}", index)
            if not word.isprintable():
                secret = bool(index and secret_name(value[index - 1]) and value[index - 1].startswith("-")) or \
                    (word.startswith("-") and "=" in word and secret_name(word.partition("=")[0]))
                raise fail(f"expected a word of printable text (no newline or other control character), "
                           f"got {_shown(word, secret)}", index)
        words = list(value)
    else:
        raise fail(f"expected {expected}, got {show(value)}")
    if not words:
        raise fail(f"expected {expected}, got an empty command")
    return tuple(words)


def _args(value: Any) -> tuple[str, ...]:
    """Extra flags: a list of strings (numbers are written as they read), printable text only."""
    if not isinstance(value, (list, tuple)):
        raise fail(f"expected a list of extra command-line arguments, got {show(value)}")
    args: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)) or item == "":
            raise fail(f"expected an argument (a string or a number), got {show(item)}", index)
        if not str(item).isprintable():
            secret = bool(args and secret_name(args[-1]) and args[-1].startswith("-")) or \
                (str(item).startswith("-") and "=" in str(item) and secret_name(str(item).partition("=")[0]))
            raise fail(f"expected an argument of printable text (no newline or other control character), "
                       f"got {_shown(str(item), secret)}", index)
        args.append(str(item))
    return tuple(args)


def _env(value: Any) -> dict[str, str]:
    """Environment variables: names as a shell takes them, values of printable text (one line of a unit or a job
    script each)."""
    if not isinstance(value, Mapping):
        raise fail(f"expected a mapping of environment variables to values, got {show(value)}")
    env = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise fail(f"expected an environment variable name (letters, digits, '_'), got {show(key)}", key, on="key")
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise fail(f"expected a value (a string or a number), got {show(item)}", key)
        if not str(item).isprintable():
            raise fail(f"expected a value of printable text (no newline or other control character), "
                       f"got {_shown(str(item), secret_name(key))}", key)
        env[key] = str(item)
    return env


def _env_names(value: Any) -> tuple[str, ...]:
    """``secret_env``: names of ``env`` whose values are secrets (besides those whose name says so)."""
    if not isinstance(value, (list, tuple)):
        raise fail(f"expected a list of environment variable names (of launch.env), got {show(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item or not item.replace("_", "a").isalnum() or item[0].isdigit():
            raise fail(f"expected an environment variable name (letters, digits, '_'), got {show(item)}", index)
    return tuple(value)


_TEXT = {"type": "string", "minLength": 1}
_SCALAR = {"anyOf": [_TEXT, {"type": "number"}]}    # a number is written as it reads
COMMAND = Check(_words, accepts={"anyOf": [_TEXT, {"type": "array", "items": _TEXT, "minItems": 1}],
                                 "description": "a command: a string or a non-empty list of strings"})
ARGS = Check(_args, accepts={"type": "array", "items": _SCALAR, "description": "extra command-line arguments"})
ENV = Check(_env, accepts={"type": "object", "additionalProperties": _SCALAR,
                           "description": "environment variables and their values"})
SECRET_ENV = Check(_env_names, accepts={"type": "array", "items": _TEXT,
                                        "description": "names of env whose values are secrets"})


class LaunchSpec(BaseModel):
    """What a generated unit runs; every key optional but ``model`` for an SGLang server."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    EXPECTED: ClassVar[str] = "a mapping of launch settings (model, tp, args, ...)"

    model: Annotated[str, printable("a model path or name")] | None = None
    tp: Annotated[int, integer("a tensor-parallel size (an integer >= 1)", 1)] | None = None
    transfer_backend: Annotated[str, _choice(TRANSFER_BACKENDS, "a KV transfer backend")] = "mooncake"
    bootstrap_port: Port | None = None
    ib_device: Annotated[str, printable("an InfiniBand device (mlx5_0, or a comma list)")] | None = None
    host: Annotated[str, printable("an address to listen on (0.0.0.0, 127.0.0.1)")] | None = None
    python: Annotated[str, printable("the path of a Python interpreter")] | None = None
    command: Annotated[tuple[str, ...], COMMAND] | None = None
    args: Annotated[tuple[str, ...], ARGS] = ()
    env: Annotated[dict[str, str], ENV] = {}
    secret_env: Annotated[tuple[str, ...], SECRET_ENV] = ()   # env names that hold secrets
    package: Annotated[str, _choice(ROUTER_PACKAGES, "a router package")] = DEFAULT_ROUTER_PACKAGE
    policy: Annotated[str, printable("a routing policy (cache_aware, round_robin, ...)")] | None = None
    prometheus_port: Port | None = None
    dist_port: Port | None = None     # a server over several nodes: where its ranks meet on rank 0's host
    dist_addr: Address | None = None  # ... at this address (default: rank 0's host's)

    @property
    def secrets(self) -> dict[str, str]:
        """The env variables that are secrets: named in ``secret_env``, or by a name that says so."""
        return {key: value for key, value in self.env.items() if key in self.secret_env or secret_name(key)}

    @property
    def public_env(self) -> dict[str, str]:
        """The env variables that are not secrets."""
        secrets = self.secrets
        return {key: value for key, value in self.env.items() if key not in secrets}

    def secret_values(self) -> list[str]:
        """Every secret value of the launch: its secret env values, and the values of the secret flags (and
        assignments) of its command and its args."""
        return [*self.secrets.values(), *secret_args(self.command or ()), *secret_args(self.args)]


def check_launch_keys(name: str, role: str, launch: LaunchSpec, *, nnodes: int = 1, engine: str = "sglang") -> None:
    """Each key given belongs to the role's kind of launch, of its serving engine; a server names its model; only a
    server over several nodes has a rendezvous."""
    if role == "other":
        raise fail(f"service '{name}' has role other: pdtui generates units for prefill, decode and router only",
                   "launch", on="key")
    title = ENGINE_TITLES.get(engine, engine)
    router = "a router" if engine == "sglang" else f"{title}'s router"
    allowed, kind = ((ENGINE_ROUTER_KEYS[engine], router) if role == "router"
                     else (ENGINE_SERVER_KEYS[engine], f"{'an' if title[0] in 'AEIOSaeio' else 'a'} {title} server"))
    for key in sorted(launch.model_fields_set - allowed):
        raise fail(f"'{key}' is not a launch key of {kind} (service '{name}' is a {role}); expected one of "
                   f"{', '.join(sorted(allowed))}", "launch", key, on="key")
    if role != "router" and launch.model is None:
        raise fail(f"the launch of service '{name}' needs a model (its --model-path)", "launch", on="key")
    backends = ENGINE_TRANSFER_BACKENDS[engine]
    if role != "router" and "transfer_backend" in launch.model_fields_set and launch.transfer_backend not in backends:
        raise fail(f"expected a KV transfer backend of {title}: one of {', '.join(backends)}, got "
                   f"{show(launch.transfer_backend)}", "launch", "transfer_backend")
    if launch.python is not None and launch.command is not None:
        raise fail(f"the launch of service '{name}' has both python and command, expected one of them",
                   "launch", "command", on="key")
    for key in (k for k in RENDEZVOUS_KEYS if k in launch.model_fields_set and role != "router" and nnodes < 2):
        raise fail(f"service '{name}' runs on one host: '{key}' is the rendezvous of a server over several nodes "
                   "(hosts: [RANK0, RANK1, ...])", "launch", key, on="key")
    for index, key in enumerate(launch.secret_env):
        if key not in launch.env:
            raise fail(f"secret_env names {key}, which is not in launch.env of service '{name}' (expected one of "
                       f"{', '.join(launch.env) or 'no names: launch.env is empty'})", "launch", "secret_env", index)
    if launch.bootstrap_port is not None and role != "prefill":
        raise fail(f"service '{name}' is a {role}: only a prefill has a bootstrap_port", "launch", "bootstrap_port",
                   on="key")
