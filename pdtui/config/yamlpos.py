"""The YAML layer: the file composed into nodes (not Python objects), so that the start of every
key and value is known by its path and duplicate keys, which PyYAML would silently collapse, are caught."""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Any

import yaml

from pdtui.config.errors import ConfigError, NodePath, Wording, show, show_key

MAX_FILE_BYTES = 1 << 20      # a config is a page or two; anything bigger is the wrong file
MAX_NODES = 100_000           # aliases can expand a small file exponentially ("billion laughs")
MAX_INT_DIGITS = 4300         # Python's default limit of int(text): a longer integer is no config's



@dataclass
class Positions:
    """Start marks of every key and value in the document, by path."""

    keys: dict[NodePath, yaml.Mark] = field(default_factory=dict)
    values: dict[NodePath, yaml.Mark] = field(default_factory=dict)

    def find(self, path: NodePath, on: str = "value") -> tuple[int, int]:
        """1-based line and column for ``path``, else for its nearest written ancestor."""
        mark = self.keys.get(path) if on == "key" else None
        mark = mark or self.values.get(path)
        while mark is None and path:
            path = path[:-1]
            mark = self.keys.get(path) or self.values.get(path)
        return (mark.line + 1, mark.column + 1) if mark else (1, 1)


_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class Walker:
    """Turns composed nodes into plain data, recording positions as it goes."""

    def __init__(self, source: str, wording: Wording | None = None) -> None:
        self.source = source
        self.wording = wording or Wording()
        self.positions = Positions()
        self._scalars = yaml.constructor.SafeConstructor()
        self._open: set[int] = set()
        self._budget = MAX_NODES

    def error(self, mark: yaml.Mark | None, message: str) -> ConfigError:
        return error_at(self.source, mark, message)

    def walk(self, node: yaml.Node, path: NodePath) -> Any:
        self.positions.values[path] = node.start_mark
        self._budget -= 1
        if self._budget < 0:
            raise self.error(node.start_mark, "too many nodes (aliases expanding?), expected a config of a sane size")
        if id(node) in self._open:
            raise self.error(node.start_mark, "recursive alias, expected a tree of mappings and lists")
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if node.tag not in (_MAP_TAG, _SEQ_TAG):
            raise self.error(node.start_mark, f"unsupported YAML tag {show(node.tag)}, expected a plain mapping or list")
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self.walk(child, path + (i,)) for i, child in enumerate(node.value)]
        finally:
            self._open.discard(id(node))

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        """The scalar's value; a value its tag's constructor cannot make (an integer past Python's 4300 digits, a
        date past the month's end, ``!!int abc``) or a float too large to hold is one error line at it."""
        try:
            value = self._scalars.construct_object(node)
        except yaml.MarkedYAMLError as exc:
            raise self.error(exc.problem_mark or node.start_mark, _yaml_problem(exc)) from None
        except Exception as exc:      # PyYAML's constructors call int(), float(), datetime() and the like unguarded
            raise self.error(node.start_mark, _unmade(node, exc)) from None
        if isinstance(value, int) and _digits(value) > _max_digits():   # 0x..., 1:59:59:... are not cut by Python
            raise self.error(node.start_mark, f"integer out of range (about {_digits(value)} digits), expected a "
                                              f"number of at most {_max_digits()} digits")
        if isinstance(value, float) and math.isinf(value) and not _INFINITY.fullmatch(node.value):
            raise self.error(node.start_mark, f"number out of range ({_size(node.value)}), expected a number a float "
                                              f"can hold (at most about {sys.float_info.max:.1e})")
        return value

    def _mapping(self, node: yaml.MappingNode, path: NodePath) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                for source in reversed(self._merge_sources(value_node)):   # the first one wins
                    merged.update(self.walk(source, path))
        self.positions.values[path] = node.start_mark
        data = dict(merged)
        first_seen: dict[str, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error(key_node.start_mark, f"expected a plain key in {self.wording.describe(path)}, got a complex key")
            key = key_node.value
            if key in first_seen:
                raise self.error(
                    key_node.start_mark,
                    f"duplicate key {show_key(key)} in {self.wording.describe(path)} (first at line {first_seen[key].line + 1})",
                )
            first_seen[key] = key_node.start_mark
            self.positions.keys[path + (key,)] = key_node.start_mark
            data[key] = self.walk(value_node, path + (key,))
        return data

    def _merge_sources(self, node: yaml.Node) -> list[yaml.MappingNode]:
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        mappings = []
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise self.error(source.start_mark, "expected a mapping (or a list of mappings) to merge with '<<'")
            mappings.append(source)
        return mappings


_INFINITY = re.compile(r"[-+]?\.(?:inf|Inf|INF)")
"""YAML's own spelling of infinity: the one way a float is meant to be infinite."""


def _size(text: str) -> str:
    """How long a number is, in digits: ``5000 digits``."""
    return f"{sum(ch.isdigit() for ch in text)} digits"


def _max_digits() -> int:
    """The most digits an integer of a config may have: what Python turns into text, at most its default 4300 (a
    config's numbers are ports, GPUs and seconds; 0 would be no limit at all)."""
    return min(sys.get_int_max_str_digits() or MAX_INT_DIGITS, MAX_INT_DIGITS)


def _digits(number: int) -> int:
    """About how many decimal digits ``number`` has, without writing it out (which Python refuses past its limit)."""
    return int(abs(number).bit_length() * math.log10(2)) + 1


def _unmade(node: yaml.ScalarNode, exc: Exception) -> str:
    """Why a scalar could not be made, in the words of an error line."""
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return f"integer out of range ({_size(node.value)}), expected a number of at most {_max_digits()} digits"
    kind = node.tag.rpartition(":")[2] or "value"
    why = str(exc) if isinstance(exc, ValueError) and node.value not in str(exc) else ""   # "day is out of range"
    return f"expected a valid {kind}, got {show(node.value)}" + (f" ({why})" if why else "")


def error_at(source: str, mark: yaml.Mark | None, message: str) -> ConfigError:
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    return ConfigError(source, line, col, message)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's context and problem as one sentence."""
    kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
    words = ", ".join(part for part in (exc.context, exc.problem or "invalid YAML") if part)
    hint = " (indent with spaces, not tabs)" if "'\\t'" in words else ""
    return f"{kind}: {words}{hint}"


def compose(text: str, source: str) -> yaml.Node | None:
    """The document's root node, or None for an empty document."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        raise error_at(source, exc.problem_mark or exc.context_mark, _yaml_problem(exc)) from None
    except yaml.reader.ReaderError as exc:
        before = text[: exc.position]
        line, col = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
        raise ConfigError(source, line, col, f"unacceptable character #x{exc.character:04x}, expected printable text") from None
    except RecursionError:
        raise ConfigError(source, 1, 1, "nested too deeply, expected a config of a sane shape") from None



def read_text(source: str) -> str:
    def error(message: str, line: int = 1, col: int = 1) -> ConfigError:
        return ConfigError(source, line, col, message)

    try:
        info = os.stat(source)
        if stat.S_ISDIR(info.st_mode):
            raise error("is a directory, expected a YAML config file")
        if not stat.S_ISREG(info.st_mode):
            raise error("not a regular file, expected a YAML config file")
        with open(source, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise error("no such file, expected a YAML config file") from None
    except OSError as exc:
        raise error(f"cannot read the file ({exc.strerror or exc}), expected a readable YAML config file") from None
    if len(raw) > MAX_FILE_BYTES:
        raise error(f"file larger than {MAX_FILE_BYTES // 1024} KiB, expected a YAML config file")
    if b"\0" in raw:
        raise error("binary file, expected a YAML text file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"byte 0x{raw[exc.start]:02x} is not UTF-8, expected a UTF-8 text file", line, col) from None

