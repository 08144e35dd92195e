"""Field types: each value of the config checked on its own, with the wording of what was expected."""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BeforeValidator, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from pdtui.config import regex
from pdtui.config.defaults import ENGINES, ROLES
from pdtui.config.errors import did_you_mean, fail, show

DURATION_EXPECTED = "a duration like 90s, 6m, 1h or a number of seconds"
_NUMBER = r"\d+(?:\.\d+)?"
_HMS = rf"(?:({_NUMBER})h)?(?:({_NUMBER})m)?(?:({_NUMBER})s)?"   # JSON Schema's regexes too: no named groups
_DURATION = re.compile(_HMS)


@dataclass(frozen=True, slots=True)
class Check(BeforeValidator):
    """pdtui's check of a value (run before pydantic's own, so an error is in pdtui's words) and the JSON Schema of
    what it accepts.

    ``pdtui schema`` tells editors what the loader takes, which is not always what the Python type holds: a float
    of seconds is written ``90s``, a command is a string or a list. The schema is stated beside the check it
    describes, so the two are read (and changed) together.
    """

    accepts: dict[str, Any] = field(kw_only=True, compare=False)   # a dict: out of the hash Annotated takes

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return copy.deepcopy(self.accepts)


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``"90s"``, ``"6m"``, ``"1h"``, ``"1h30m"``, ``45`` or ``2.5``.

    Raises ValueError (with a message fit for the user) for anything else,
    including negative, infinite and boolean values.
    """
    seconds: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:     # an integer past a float's range (YAML reads any number of digits)
            seconds = math.inf
    elif isinstance(value, str):
        text = value.strip()
        if re.fullmatch(_NUMBER, text):
            seconds = float(text)
        elif text and (match := _DURATION.fullmatch(text)):
            h, m, s = (float(part or 0) for part in match.groups())
            seconds = h * 3600 + m * 60 + s
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"expected {DURATION_EXPECTED}, got {show(value)}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds as the config would write them: ``6m``, ``1h30m``, ``90s`` is ``1m30s``."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if value]
    return "".join(parts) or "0s"


def took(seconds: float) -> str:
    """A phase's length, short: ``0.4s``, ``41s``, ``2m05s``, ``1h02m``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_elapsed(seconds: float) -> str:
    """Seconds as a clock shows time gone by: ``m:ss`` (or ``h:mm:ss``), as the badges and the verdict show it."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def check_text(value: Any, expected: str) -> str:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise fail(f"expected {expected}, got {show(value)}")
    return value


def check_ssh_word(value: Any, expected: str) -> str:
    """Host names and users go on an ssh command line: no spaces, no option lookalikes."""
    text = check_text(value, expected)
    if text.startswith("-") or any(ch.isspace() for ch in text):
        raise fail(f"expected {expected} (no spaces, not starting with '-'), got {show(value)}")
    return text


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_name(value: Any) -> str:
    """The name of an environment variable of pdtui's (a secret's home: the secret never sits in the file)."""
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise fail(f"expected the name of an environment variable (letters, digits, '_'), got {show(value)}")
    return value


def check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise fail(f"expected a {what} name (letters, digits, '_', '.', '-'), got {show(value)}")
    return value


def check_int(value: Any, expected: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        raise fail(f"expected {expected}, got {show(value)}")
    return value


def check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(f"expected true or false, got {show(value)}")
    return value


def check_role(value: Any) -> str:
    if value not in ROLES:
        raise fail(f"expected a role: one of {', '.join(ROLES)}, got {show(value)}{did_you_mean(value, ROLES)}")
    return value


def check_engine(value: Any) -> str:
    if value not in ENGINES:
        raise fail(f"expected a serving engine: one of {', '.join(ENGINES)}, got {show(value)}"
                   f"{did_you_mean(value, ENGINES)}")
    return value


def check_regex(value: Any) -> str:
    """A pattern pdtui applies to every line of a journal: valid, and never exponential (see config/regex.py)."""
    if not isinstance(value, str) or not value:
        raise fail(f"expected a regular expression (a string), got {show(value)}")
    try:
        re.compile(value)
        regex.Bounded(value)              # what searches it (the regex package, re's syntax)
    except (re.error, regex.bounded_re.error, OverflowError, RecursionError) as exc:   # the last two: absurd repeats
        raise fail(f"expected a valid regular expression, got {show(value)}: {exc}") from None
    if why := regex.hazard(value):
        raise fail(f"expected a regular expression that cannot take exponential time, got {show(value)}: {why}")
    return value


def check_duration(value: Any) -> float:
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if seconds == 0:
        raise fail(f"expected a duration greater than zero, got {show(value)}")
    return seconds


def check_interval_or_off(value: Any) -> float | None:
    """A duration, or ``false``/``off`` for never."""
    if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
        return None
    try:
        return check_duration(value)
    except PydanticCustomError as exc:
        raise fail(f"{exc.message()}, or false/off for never") from None


def list_of(check: Any, expected: str) -> Any:
    """A YAML list checked item by item, pointing at the bad item."""

    def validate(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, (list, tuple)):
            raise fail(f"expected {expected}, got {show(value)}")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(check(item))
            except PydanticCustomError as exc:
                raise fail(exc.message(), index) from None
        return tuple(items)

    return validate


def gpu_index(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"expected a list of GPU indexes (integers), got {show(value)}")
    return check_int(value, "a GPU index (an integer >= 0)", 0)


def check_absolute_dir(value: Any) -> str:
    text = check_text(value, "an absolute path of a folder")
    if not text.startswith("/"):
        raise fail(f"expected an absolute path of a folder (starting with '/'), got {show(value)}")
    return text.rstrip("/") or "/"


# --------------------------------------------------------------------------- each check with what it accepts

WORD_PATTERN = r"^[^\s-]\S*$"
"""One word, not an option: what :func:`check_ssh_word` (and a Slurm word) lets through, as JSON Schema says it."""
NAME_PATTERN = f"^{_NAME.pattern}$"
"""A host's, cluster's or service's name (a key of the config), as JSON Schema says it."""
YAML_1_1_TRUE = ("yes", "Yes", "YES", "on", "On", "ON")
YAML_1_1_FALSE = ("no", "No", "NO", "off", "Off", "OFF")
"""Words pdtui's YAML (PyYAML: YAML 1.1) reads as true and false, which an editor's YAML 1.2 reads as strings: the
schema accepts them so that ``sudo: yes`` is no error in the editor either."""


def printable(expected: str) -> Check:
    """Printable text, not empty."""
    return Check(lambda v: check_text(v, expected), accepts={"type": "string", "minLength": 1, "description": expected})


def ssh_word(expected: str) -> Check:
    """One word that goes on an ssh command line: no spaces, no option lookalikes."""
    return Check(lambda v: check_ssh_word(v, expected),
                 accepts={"type": "string", "pattern": WORD_PATTERN, "description": expected})


def integer(expected: str, low: int, high: int | None = None) -> Check:
    """An integer from ``low`` (to ``high``): YAML's integers only, never a boolean or a float."""
    bounds = {"minimum": low, **({"maximum": high} if high is not None else {})}
    return Check(lambda v: check_int(v, expected, low, high), accepts={"type": "integer", **bounds, "description": expected})


def config_name(what: str) -> Check:
    """A name the config gives (a service's, a host's): letters, digits, ``_ . -``."""
    return Check(lambda v: check_name(v, what), accepts={"type": "string", "pattern": NAME_PATTERN,
                                                         "description": f"a {what} name"})


def listed(item: Check, expected: str) -> Check:
    """A YAML list of what ``item`` accepts, checked item by item (an error points at the bad item)."""
    return Check(list_of(item.func, expected), accepts={"type": "array", "items": item.accepts, "description": expected})


def _duration_schema() -> list[dict[str, Any]]:
    """What :func:`check_duration` accepts: seconds above zero, or a text :func:`parse_duration` reads as some
    (a digit 1-9 somewhere: all zeros is no time)."""
    return [{"type": "number", "exclusiveMinimum": 0},
            {"type": "string", "pattern": rf"^\s*(?=[^1-9]*[1-9])(?:{_NUMBER}|{_HMS})\s*$"}]


DURATION = Check(check_duration, accepts={"anyOf": _duration_schema(), "description": DURATION_EXPECTED})
INTERVAL_OR_OFF = Check(check_interval_or_off, accepts={
    "anyOf": [*_duration_schema(), {"const": False}, {"enum": list(YAML_1_1_FALSE)},
              {"type": "string", "pattern": r"^\s*[oO][fF][fF]\s*$"}],
    "description": f"{DURATION_EXPECTED}, or false/off for never"})
REGEX = Check(check_regex, accepts={"type": "string", "minLength": 1, "description": "a regular expression"})
ENV_NAME = Check(check_env_name, accepts={"type": "string", "pattern": f"^{_ENV_NAME.pattern}$",
                                          "description": "the name of an environment variable of pdtui's"})
GPU_INDEX = Check(gpu_index, accepts={"type": "integer", "minimum": 0, "description": "a GPU index"})

Port = Annotated[int, integer("a port number (1-65535)", 1, 65535)]
Address = Annotated[str, ssh_word("a host name or IP address")]
UserName = Annotated[str, ssh_word("a user name")]
FilePath = Annotated[str, printable("a path to a known_hosts file")]
AbsoluteDir = Annotated[str, Check(check_absolute_dir, accepts={"type": "string", "pattern": "^/",
                                                                "description": "an absolute path of a folder"})]
HostName = Annotated[str, printable("a host name")]
DeploymentName = Annotated[str, printable("a deployment name (a string)")]
NumaNode = Annotated[int, integer("a NUMA node number (an integer >= 0)", 0)]
LogRegex = Annotated[str | None, Check(lambda v: None if v is None else check_regex(v),
                                       accepts={"anyOf": [REGEX.accepts, {"type": "null"}]})]
Bool = Annotated[bool, Check(check_bool, accepts={
    "anyOf": [{"type": "boolean"}, {"enum": [*YAML_1_1_TRUE, *YAML_1_1_FALSE]}], "description": "true or false"})]
Duration = Annotated[float, DURATION]
GpuIndexes = Annotated[tuple[int, ...], listed(GPU_INDEX, "a list of GPU indexes (integers)")]
Engine = Annotated[str, Check(check_engine, accepts={"enum": list(ENGINES), "description": "a serving engine"})]
