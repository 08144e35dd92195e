"""A config's author is not trusted: what an error line quotes of the file is inert and short, and a value PyYAML
cannot make is one positioned line like any other."""

from __future__ import annotations

import unicodedata

import pytest

from pdtui.config import ConfigError, parse_config

OSC52 = "\x1b]52;c;cHduZWQ=\x07\x1b[31mRED\x1b[0m"
HOSTS = "hosts:\n  gpu0: {local: true}\n"
SERVICES = "services:\n  s: {host: gpu0, unit: u}\n"


def error_of(text: str, source: str = "t.yaml") -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source)
    return caught.value


def visible(line: str) -> bool:
    """No control, format character or separator: nothing a terminal would act on or hide."""
    return not any(unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in line)


@pytest.mark.parametrize("text", [
    f'name: x\n{HOSTS}{SERVICES}"{OSC52.encode("unicode_escape").decode()}": 1\n',
    f'name: x\nhosts:\n  gpu0: {{local: true, "{OSC52.encode("unicode_escape").decode()}": 1}}\n{SERVICES}',
    f'name: x\n{HOSTS}services:\n  "\\e]52;c;eA==\\a": {{host: gpu0, unit: u}}\n',
    f'name: x\n{HOSTS}{SERVICES}"\\u202eevil\\u2066": 1\n',
    f'name: x\n{HOSTS}{SERVICES}"a\\u061cb": 1\n"a\\u061cb": 2\n',
], ids=["top-level-key", "host-key", "service-name", "bidi-key", "duplicate-key"])
def test_a_key_with_terminal_escapes_is_shown_as_text(text: str) -> None:
    line = str(error_of(text))
    assert line.startswith("t.yaml:") and visible(line)
    assert "\\x1b]52" in line or "\\u202e" in line or "\\u061c" in line


def test_the_files_name_is_shown_as_text() -> None:
    line = str(error_of(f"name: x\n{HOSTS}{SERVICES}bogus: 1\n", source=f"evil{OSC52}\u202e.yaml"))
    assert visible(line) and line.startswith("evil␛]52;c;cHduZWQ=␇RED\\u202e.yaml:6:1: unknown key 'bogus'")


def test_a_key_of_any_length_is_cut_short() -> None:
    line = str(error_of(f"name: x\n{HOSTS}{SERVICES}{'k' * 1000}: 1\n"))
    assert line.startswith("t.yaml:6:1: unknown key 'kkk") and len(line) < 200


@pytest.mark.parametrize(("value", "fragment"), [
    ("9" * 5000, "integer out of range (5000 digits), expected a number of at most 4300 digits"),
    ("0x" + "f" * 5000, "integer out of range (about 6021 digits)"),
    ("1" + ":59" * 3000, "integer out of range (about 5335 digits)"),
    ("9" * 4400 + ".5", "number out of range (4401 digits), expected a number a float can hold"),
    ("1.0e+400", "number out of range"),
    ("2026-02-30", "expected a valid timestamp, got '2026-02-30' (day is out of range for month)"),
    ("!!int abc", "expected a valid int, got 'abc'"),
    ("!!bool maybe", "expected a valid bool, got 'maybe'"),
    ("!!timestamp zz", "expected a valid timestamp, got 'zz'"),
], ids=["int", "hex", "sexagesimal", "float", "exponent", "date", "tagged-int", "tagged-bool", "tagged-timestamp"])
def test_a_value_pyyaml_cannot_make_is_one_line_where_it_is(value: str, fragment: str) -> None:
    error = error_of(f"name: x\n{HOSTS}services:\n  s: {{host: gpu0, unit: u, port: {value}}}\n")
    assert (error.line, error.col) == (5, 34) and fragment in error.message


def test_infinity_written_as_such_is_judged_as_a_value() -> None:
    error = error_of(f"name: x\n{HOSTS}services:\n  s: {{host: gpu0, unit: u, timeout: .inf}}\n")
    assert "got inf" in error.message
