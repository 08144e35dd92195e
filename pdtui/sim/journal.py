"""The sim's journal: one JSON object per line in the shape ``journalctl -o json`` prints.

Why this layout: a line is stored exactly as ``journalctl -o json --all`` will
print it, so the ``journalctl`` stand-in passes lines through without decoding
them, and a cursor is simply the byte offset of its line (``--after-cursor`` is
a seek).  Lines are encoded compactly (``"KEY":"value"``); since a quote inside
a JSON string is always escaped, the substring ``"FIELD":"value"`` occurs in a
line exactly when that field has that value, which makes matching a substring
search.  ``MESSAGE`` is stored as journald would show it with ``--all``: a
string for printable UTF-8, else an array of byte values; the ``null`` for long
values without ``--all`` is decided at output.

Several supervisors append at once, so a writer appends whole batches under an
exclusive ``flock``; a batch is one ``write``. Entries are stamped under that
lock, so the file's stamps never go backwards.

When the sandbox has a real journal (:mod:`pdtui.sim.realjournal`), every entry
also goes, with the same timestamps, to the sandbox's journal-remote, over a
connection of this object's own; then stamping, appending and sending happen
under the sandbox-wide lock of :class:`pdtui.sim.realjournal.Order`.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring  # json.dumps(str, ensure_ascii=False)
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdtui.sim.realjournal import Writer

FieldValue = str | list[int]
THRESHOLD = 4096
"""journalctl shows a field as ``null`` unless ``--all`` when ``FIELD=value`` is this many bytes or more."""

_NON_PRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Characters journald deems unprintable: C0/C1 controls and DEL, but not TAB or newline."""


class CursorError(ValueError):
    """A cursor that does not name an entry of this journal."""


def message_value(raw: bytes) -> FieldValue:
    """``raw`` as journald's JSON output carries it: text if printable UTF-8, else byte values."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)
    return list(raw) if _NON_PRINTABLE.search(text) else text


def too_long(field: str, value: FieldValue | None) -> bool:
    """Whether ``journalctl -o json`` without ``--all`` shows this field as ``null``."""
    return len(field) + 1 + value_size(value) >= THRESHOLD


def value_size(value: FieldValue | None) -> int:
    """The size in bytes of a stored field value."""
    if value is None:
        return 0
    return len(value) if isinstance(value, list) else len(value.encode("utf-8"))


def value_bytes(value: FieldValue | None) -> bytes:
    """A stored field value as the raw bytes the program logged."""
    if value is None:
        return b""
    return bytes(value) if isinstance(value, list) else value.encode("utf-8")


def encode_value(value: str) -> bytes:
    """``value`` JSON-encoded exactly as the writer encodes it (for substring matches)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


class Journal:
    """The journal file of one sandbox ROOT: ``ROOT/journal/journal.jsonl``."""

    def __init__(self, root: Path, writer_name: str | None = None) -> None:
        """``writer_name``: who writes (kept for callers; one journal-remote serves all)."""
        self.dir = Path(root) / "journal"
        self.path = self.dir / "journal.jsonl"
        self._id: str | None = None
        self._fd: int | None = None
        self._real: Writer | None = None
        self.mirrored = (self.dir / "real").is_dir()
        """Whether entries also go to the real journal (see :mod:`pdtui.sim.realjournal`)."""

    @property
    def id(self) -> str:
        """This journal's identity (the ``s=`` part of its cursors), made on first use."""
        if self._id is None:
            self._id = _read_or_create_id(self.dir / "id")
        return self._id

    def cursor(self, offset: int, realtime: int) -> str:
        """The cursor of the entry at byte ``offset``: where it is, and when (to seek near it once it is gone)."""
        return f"s={self.id};i={offset:x};t={realtime:x}"

    def seek(self, cursor: str) -> tuple[int, bool]:
        """Where ``cursor`` points: (byte offset, whether that is the very entry it names).

        As the real journalctl does, a well-formed cursor whose entry is gone (the
        file was vacuumed or rotated) seeks to the nearest entry after its time;
        CursorError for one that cannot be parsed.
        """
        parts = dict(p.split("=", 1) for p in cursor.split(";") if "=" in p)
        try:
            offset, realtime = int(parts["i"], 16), int(parts.get("t", "0"), 16)
            if len(parts["s"]) != 32:
                raise ValueError(parts["s"])
            int(parts["s"], 16)
        except (KeyError, ValueError):
            raise CursorError("Failed to seek to cursor: Invalid argument") from None
        if parts["s"] == self.id and self._entry_at(offset, cursor):
            return offset, True
        return self._first_after(realtime), False

    def _first_after(self, realtime: int) -> int:
        """The offset of the first entry stamped at or after ``realtime`` (µs), or of the file's end."""
        lines, end = self.read_lines(0)
        offset = 0
        for line in lines:
            if int(json.loads(line).get("__REALTIME_TIMESTAMP", "0")) >= realtime:
                return offset
            offset += len(line) + 1
        return end

    def _entry_at(self, offset: int, cursor: str) -> bool:
        """Whether the line at ``offset`` is the entry of ``cursor`` (every line begins with its cursor)."""
        head = b'{"__CURSOR":' + encode_value(cursor)
        try:
            with open(self.path, "rb") as f:
                if offset:
                    f.seek(offset - 1)
                    if f.read(1) != b"\n":
                        return False
                return f.read(len(head)) == head
        except OSError:
            return False

    def append(self, entries: Sequence[Mapping[str, FieldValue]]) -> None:
        """Append ``entries`` (fields without ``__CURSOR``) as one locked write, stamped as they are written.

        With a real journal, return once they are in it too (a reader started next sees them).
        """
        entries = [{k: v for k, v in e.items() if k not in _STAMPS} for e in entries]
        exported: list[bytes] = []
        if self.mirrored:
            from pdtui.sim.realjournal import export_entry
            exported = [export_entry(e) for e in entries]
        self.append_encoded([json.dumps(e, ensure_ascii=False, separators=(",", ":"))[1:].encode("utf-8")
                             for e in entries], exported, wait=True)

    def append_encoded(self, bodies: Sequence[bytes], exported: Sequence[bytes] = (), wait: bool = False) -> None:
        """Append entries already encoded, without their stamps, as one locked write.

        A body is a JSON object without its opening brace and stamps (see :meth:`LineEncoder.encode`).
        ``exported``: the same entries in export format, for the real journal (``wait``: until written).
        """
        if not bodies:
            return
        if not exported or not self.mirrored:
            self._append_jsonl(bodies, None)
            return
        writer = self.real_writer()
        with writer.order.held() as order:
            stamped = order.stamps(len(bodies))
            self._append_jsonl(bodies, stamped)
            writer.send(order, stamped, exported)
        if wait:
            writer.wait_written()

    def real_writer(self) -> Writer:
        """This object's connection to the sandbox's journal-remote, made on first use."""
        if self._real is None:
            from pdtui.sim.realjournal import Writer
            self._real = Writer(self.dir.parent)
        return self._real

    def _append_jsonl(self, bodies: Sequence[bytes], stamped: Sequence[tuple[int, int]] | None) -> None:
        fd = self._writer_fd()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            offset = os.fstat(fd).st_size
            chunks = []
            for n, body in enumerate(bodies):
                real, mono = stamps() if stamped is None else stamped[n]
                line = b'{"__CURSOR":"%s","__REALTIME_TIMESTAMP":"%d","__MONOTONIC_TIMESTAMP":"%d"%s%s\n' % (
                    self.cursor(offset, real).encode("ascii"), real, mono, b"" if body == b"}" else b",", body)
                chunks.append(line)
                offset += len(line)
            _write_all(fd, b"".join(chunks))
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _writer_fd(self) -> int:
        """The append fd, opened again when the file was rotated away (renamed or removed) since."""
        state = self.file_state() if self._fd is not None else None
        if self._fd is not None and state is not None and state[0] == os.fstat(self._fd).st_ino:
            return self._fd
        self._close_fd()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self._fd

    def file_state(self) -> tuple[int, int] | None:
        """(inode, size) of the journal file, None while there is none: a follower sees rotation by it."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size

    def read_lines(self, start: int) -> tuple[list[bytes], int]:
        """Complete lines from byte ``start`` on, and the offset just past the last of them.

        A batch being written may be seen in part: an unfinished last line is
        left for the next read.
        """
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read()
        except FileNotFoundError:
            return [], start
        end = data.rfind(b"\n") + 1
        if end == 0:
            return [], start
        return data[:end - 1].split(b"\n"), start + end

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Close the file, and stop the real journal's writer once it has written everything."""
        self._close_fd()
        if self._real is not None:
            self._real.close()
            self._real = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_or_create_id(path: Path) -> str:
    """Read the journal id, creating it atomically (link fails if another writer won)."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".id.{os.getpid()}")
    tmp.write_text(uuid.uuid4().hex)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()


_HOSTNAME = socket.gethostname()


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip().replace("-", "")
    except OSError:
        return "0" * 32


BOOT_ID = _boot_id()
"""This machine's boot: ``journalctl -f`` shows entries of the current boot only."""


_last = [0, 0]
_STAMPS = ("__REALTIME_TIMESTAMP", "__MONOTONIC_TIMESTAMP")


def stamps() -> tuple[int, int]:
    """(realtime, monotonic) in µs for a new entry, each larger than this process's last.

    The real journalctl orders entries of different files by their monotonic time, and
    one ``--after-cursor`` seek among entries with the same one shows some twice and
    loses others: a busy writer must not give two entries the same microsecond.
    """
    real = max(time.time_ns() // 1000, _last[0] + 1)
    mono = max(time.monotonic_ns() // 1000, _last[1] + 1)
    _last[0], _last[1] = real, mono
    return real, mono


def _common(priority: int, pid: int, comm: str, transport: str) -> dict[str, FieldValue]:
    now, mono = stamps()
    return {
        "__REALTIME_TIMESTAMP": str(now),
        "__MONOTONIC_TIMESTAMP": str(mono),
        "_BOOT_ID": BOOT_ID,
        "PRIORITY": str(priority),
        "_PID": str(pid),
        "_COMM": comm,
        "SYSLOG_IDENTIFIER": comm,
        "_TRANSPORT": transport,
        "_HOSTNAME": _HOSTNAME,
    }


def unit_entry(unit: str, invocation: str, pid: int, comm: str, raw: bytes, priority: int) -> dict[str, FieldValue]:
    """An entry for one line a unit's process wrote to stdout or stderr (stamped now; restamped when appended)."""
    real, mono = stamps()
    return json.loads(b'{"__REALTIME_TIMESTAMP":"%d","__MONOTONIC_TIMESTAMP":"%d",%s' % (
        real, mono, LineEncoder(unit, invocation, pid, comm).encode(raw, priority)))


class LineEncoder:
    """Encodes the journal entry of each line a unit's process writes to stdout or stderr.

    A busy backend writes tens of thousands of lines a second; the fields that never
    change are encoded once, so a line costs its message. The stamps are added when
    the entry is appended (:meth:`Journal.append_encoded`).
    """

    def __init__(self, unit: str, invocation: str, pid: int, comm: str, export: bool = False) -> None:
        def fields(entry: Mapping[str, FieldValue]) -> bytes:
            return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))[1:-1].encode("utf-8")
        middle = {"_BOOT_ID": BOOT_ID, "_PID": str(pid), "_COMM": comm, "SYSLOG_IDENTIFIER": comm,
                  "_TRANSPORT": "stdout", "_HOSTNAME": _HOSTNAME}
        tail = {"_SYSTEMD_UNIT": unit, "_SYSTEMD_INVOCATION_ID": invocation}
        self._middle = b'",' + fields(middle) + b',"MESSAGE":'
        self._tail = b"," + fields(tail) + b"}"
        self.exported: list[bytes] | None = None
        """With ``export``: each encoded entry in Journal Export Format (without stamps) too, until taken."""
        if export:
            from pdtui.sim.realjournal import export_field
            self._export_field = export_field
            self._x_middle = b"".join(export_field(k.encode(), v.encode()) for k, v in middle.items())
            self._x_tail = b"".join(export_field(k.encode(), v.encode()) for k, v in tail.items()) + b"\n"
            self.exported = []

    def encode(self, raw: bytes, priority: int) -> bytes:
        """One line's entry: a JSON object without its opening brace and stamps (see :meth:`Journal.append_encoded`).

        A line beginning ``<0>`` to ``<7>`` has that priority and loses the prefix, as journald reads a unit's
        output (SyslogLevelPrefix=yes, the default).
        """
        if raw[:1] == b"<" and raw[2:3] == b">" and 48 <= raw[1] <= 55:
            priority, raw = raw[1] - 48, raw[3:]
        prio = b"%d" % priority
        if self.exported is not None:
            self.exported.append(b"".join((b"PRIORITY=", prio, b"\n", self._x_middle,
                                           self._export_field(b"MESSAGE", raw), self._x_tail)))
        return b"".join((b'"PRIORITY":"', prio, self._middle, _encode_message(raw), self._tail))

    def take_exported(self) -> list[bytes]:
        if not self.exported:
            return []
        exported, self.exported = self.exported, []
        return exported


def _encode_message(raw: bytes) -> bytes:
    """``message_value(raw)`` JSON-encoded."""
    value = message_value(raw)
    if type(value) is str:
        return encode_basestring(value).encode("utf-8")
    return json.dumps(value, separators=(",", ":")).encode("ascii")


def pid1_entry(unit: str, invocation: str, message: str, priority: int = 6) -> dict[str, FieldValue]:
    """An entry systemd (PID 1) writes about ``unit``: it carries UNIT, not _SYSTEMD_UNIT."""
    entry = _common(priority, 1, "systemd", "journal")
    entry.update(MESSAGE=message, _SYSTEMD_UNIT="init.scope", UNIT=unit, INVOCATION_ID=invocation)
    return entry


def executor_entry(unit: str, invocation: str, pid: int, program: str, message: str,
                   priority: int) -> dict[str, FieldValue]:
    """An entry systemd's executor writes about ``unit`` from the process forked to run ``program``, before it runs
    it (``Failed to locate executable …``): in the unit's own cgroup, so it carries both _SYSTEMD_UNIT and UNIT."""
    entry = _common(priority, pid, f"({os.path.basename(program)})", "journal")
    entry.update(MESSAGE=message, _SYSTEMD_UNIT=unit, _SYSTEMD_INVOCATION_ID=invocation, UNIT=unit,
                 INVOCATION_ID=invocation)
    return entry


def pid1_boot_entry() -> dict[str, FieldValue]:
    """The first line systemd writes at boot: about no unit."""
    entry = _common(6, 1, "systemd", "journal")
    entry.update(MESSAGE="Sandbox journal started.", _SYSTEMD_UNIT="init.scope")
    return entry
