"""Field types: each value of the config checked on its own, with the wording of what was expected."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from pdtui.config import regex
from pdtui.config.defaults import ENGINES, ROLES
from pdtui.config.errors import did_you_mean, fail, show

DURATION_EXPECTED = "a duration like 90s, 6m, 1h or a number of seconds"
_NUMBER = r"\d+(?:\.\d+)?"
_DURATION = re.compile(rf"(?:(?P<h>{_NUMBER})h)?(?:(?P<m>{_NUMBER})m)?(?:(?P<s>{_NUMBER})s)?")


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
            h, m, s = (float(match[unit] or 0) for unit in "hms")
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
    except (re.error, OverflowError, RecursionError) as exc:   # the last two: absurd repeats, deep nesting
        raise fail(f"expected a valid regular expression, got {show(value)}: {exc}") from None
    if why := regex.hazard(value):
        raise fail(f"expected a regular expression that cannot take exponential time, got {show(value)}: {why}")
    return value


_UNIT_CHARS = re.compile(r"[A-Za-z0-9:_.\\@-]+")
_UNIT_TYPES = frozenset(
    {"service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"}
)


def normalize_unit(value: Any) -> str:
    """A systemd service unit name, with ``.service`` appended when no suffix is given.

    Unit names go on command lines (over SSH, through a shell): only systemd's
    own character set is let through.
    """
    if not isinstance(value, str) or not value:
        raise fail(f"expected a systemd unit name, got {show(value)}")
    if not _UNIT_CHARS.fullmatch(value) or value.startswith("-"):
        raise fail(
            f"expected a systemd unit name (letters, digits and : _ . \\ @ - only, not starting with '-'), "
            f"got {show(value)}"
        )
    suffix = value.rpartition(".")[2]
    if "." in value and suffix in _UNIT_TYPES and suffix != "service":
        raise fail(f"expected a .service unit, got {show(value)}")
    unit = value if value.endswith(".service") else value + ".service"
    stem = unit.removesuffix(".service")
    if not stem or stem.startswith("@") or stem.endswith("@"):
        raise fail(f"expected a unit name (a template needs an instance, like name@1), got {show(value)}")
    if len(unit) > 255:
        raise fail(f"expected a unit name of at most 255 characters, got {len(unit)}")
    return unit


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


Port = Annotated[int, BeforeValidator(lambda v: check_int(v, "a port number (1-65535)", 1, 65535))]
Address = Annotated[str, BeforeValidator(lambda v: check_ssh_word(v, "a host name or IP address"))]
UserName = Annotated[str, BeforeValidator(lambda v: check_ssh_word(v, "a user name"))]
FilePath = Annotated[str, BeforeValidator(lambda v: check_text(v, "a path to a known_hosts file"))]


def check_absolute_dir(value: Any) -> str:
    text = check_text(value, "an absolute path of a folder")
    if not text.startswith("/"):
        raise fail(f"expected an absolute path of a folder (starting with '/'), got {show(value)}")
    return text.rstrip("/") or "/"


AbsoluteDir = Annotated[str, BeforeValidator(check_absolute_dir)]
HostName = Annotated[str, BeforeValidator(lambda v: check_text(v, "a host name"))]
DeploymentName = Annotated[str, BeforeValidator(lambda v: check_text(v, "a deployment name (a string)"))]
NumaNode = Annotated[int, BeforeValidator(lambda v: check_int(v, "a NUMA node number (an integer >= 0)", 0))]
LogRegex = Annotated[str | None, BeforeValidator(lambda v: None if v is None else check_regex(v))]
Bool = Annotated[bool, BeforeValidator(check_bool)]
Unit = Annotated[str, BeforeValidator(normalize_unit)]
