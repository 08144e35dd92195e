"""What the places of every kind share: a name (its key in its section), and for a machine pdtui reaches, how it is
reached and how its commands are run there."""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.json_schema import SkipJsonSchema

from pdtui.config.errors import did_you_mean, fail, show, show_key
from pdtui.config.fields import Address, Bool, Check, FilePath, Port, UserName


class Place(BaseModel):
    """A place services run on: an entry of a kind's section of the config (a host of ``hosts:``, say)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    KIND: ClassVar[str]       # one place, in an error's words ("host")
    EXPECTED: ClassVar[str]   # what an entry of its section is, in an error's words

    name: SkipJsonSchema[str]     # its key in the file


class Reached(Place):
    """A machine pdtui reaches: over SSH (address, user, port, known_hosts) or directly (``local``)."""

    address: Address | None = None
    local: Bool = False
    user: UserName | None = None
    port: Port | None = None
    known_hosts: FilePath | None = None

    @model_validator(mode="after")
    def _address_or_local(self) -> Self:
        if self.local and self.address is not None:
            raise fail(f"{self.KIND} '{self.name}' has both an address and local: true, expected one of them", "local",
                       on="key")
        if not self.local and self.address is None:
            raise fail(f"{self.KIND} '{self.name}' needs an address (or local: true)", on="key")
        return self

    @property
    def reached_at(self) -> str:
        """The address others reach it at: loopback when it is this machine, else its address (its name without)."""
        return "127.0.0.1" if self.local else self.address or self.name


def commands_check(names: tuple[str, ...]) -> Check:
    """A place's ``commands:`` (how each of ``names`` is run there), with what it accepts: the metadata of its
    ``Annotated[dict[str, tuple[str, ...]], ...]``."""
    return Check(functools.partial(_commands, names), accepts=_commands_schema(names))


def each_itself(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Each command as itself (found on the machine's PATH): a ``commands:`` left out."""
    return {name: (name,) for name in names}


def _commands_schema(names: tuple[str, ...]) -> dict[str, Any]:
    """What :func:`_commands` accepts, for editors: each of ``names`` as a string (split like a shell would) or an
    argv list, and no other name."""
    argv = {"anyOf": [{"type": "string", "minLength": 1},
                      {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}]}
    return {"type": "object", "properties": {name: argv for name in names}, "additionalProperties": False,
            "description": f"how {', '.join(names)} are run here: a command line or an argv list each"}


def _commands(names: tuple[str, ...], value: Any) -> dict[str, tuple[str, ...]]:
    """Fill every command; a string is split like a shell would, a list is taken as argv."""
    if not isinstance(value, Mapping):
        raise fail(f"expected a mapping of {', '.join(names)} to commands, got {show(value)}")
    commands = each_itself(names)
    for key, argv in value.items():
        if key not in names:
            raise fail(f"unknown command {show_key(key)}, expected one of {', '.join(names)}{did_you_mean(key, names)}",
                       key, on="key")
        commands[key] = _argv(key, argv)
    return commands


def _argv(command: str, value: Any) -> tuple[str, ...]:
    expected = f"a command for {command}: a string or a non-empty list of strings"
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise fail(f"expected {expected}, got {show(value)} ({exc})", command) from None
    elif isinstance(value, (list, tuple)):
        for index, word in enumerate(value):
            if not isinstance(word, str) or not word:
                raise fail(f"expected {expected}, got {show(word)}", command, index)
        argv = list(value)
    else:
        raise fail(f"expected {expected}, got {show(value)}", command)
    if not argv:
        raise fail(f"expected {expected}, got an empty command", command)
    return tuple(argv)
