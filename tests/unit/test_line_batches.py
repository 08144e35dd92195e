"""Streams are read in pieces: split into lines with none cut, lost or joined; stderr drained to its last bytes."""

from __future__ import annotations

import pdtui.hosts.base as base
from pdtui.hosts.base import each_line, last_bytes, line_batches


def reader(*chunks: bytes):
    pieces = list(chunks)

    async def read(size: int) -> bytes:
        return pieces.pop(0) if pieces else b""
    return read


async def collect(*chunks: bytes) -> list[list[bytes]]:
    return [batch async for batch in line_batches(reader(*chunks))]


async def test_lines_split_across_reads_are_joined_and_each_read_is_one_batch() -> None:
    assert await collect(b"a\nb", b"c\nd\ne", b"\n") == [[b"a"], [b"bc", b"d"], [b"e"]]


async def test_a_last_line_without_newline_is_delivered_at_the_end() -> None:
    assert await collect(b"one\ntwo") == [[b"one"], [b"two"]]


async def test_empty_lines_are_kept_and_an_empty_stream_yields_nothing() -> None:
    assert await collect(b"\n\nx\n") == [[b"", b"", b"x"]]
    assert await collect() == []


async def test_a_line_longer_than_the_limit_is_handed_over_in_pieces(monkeypatch) -> None:
    monkeypatch.setattr(base, "MAX_LINE", 8)
    batches = await collect(b"0123456789", b"abc\n")
    assert b"".join(line for batch in batches for line in batch) == b"0123456789abc"
    assert max(len(line) for batch in batches for line in batch) <= 10


async def test_each_line_flattens_the_batches() -> None:
    assert [line async for line in each_line(line_batches(reader(b"a\nb\n", b"c\n")))] == [b"a", b"b", b"c"]


async def test_last_bytes_keeps_the_end_and_stops_quietly_on_the_errors_given() -> None:
    assert await last_bytes(reader(b"0123", b"4567", b"89"), keep=4) == b"6789"

    async def dropped(size: int) -> bytes:
        if calls:
            raise ConnectionResetError("dropped")
        calls.append(size)
        return b"partial"
    calls: list[int] = []
    assert await last_bytes(dropped, errors=(OSError,)) == b"partial"
