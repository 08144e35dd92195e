"""The sim journal and its journalctl: the JSON shape, MESSAGE encoding, cursors, matches, follow."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdtui.sim import realjournal
from pdtui.sim.journal import Journal, message_value, pid1_entry, unit_entry
from pdtui.sim.journalctl import renderer
from tests.conftest_sim import Procs, read_until  # noqa: F401 - procs is a fixture

INV_A, INV_B = "a" * 32, "b" * 32


@pytest.fixture
def journal(tmp_path):
    """The sim's journal; with PDTUI_SIM_REAL_JOURNAL=1 written to real journal files too and read by journalctl."""
    if realjournal.wanted() and realjournal.available():
        realjournal.real_dir(tmp_path).mkdir(parents=True)
    j = Journal(tmp_path)
    yield j
    j.close()
    realjournal.stop_remote(tmp_path)


def jctl(journal: Journal, *args: str) -> subprocess.CompletedProcess[bytes]:
    from pdtui.sim.sandbox import Sandbox
    argv = Sandbox(journal.dir.parent).commands["journalctl"]
    return subprocess.run([*argv, *args], capture_output=True, timeout=30)


def entries(result: subprocess.CompletedProcess[bytes]) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def line(journal: Journal, text: bytes, unit: str = "x.service", inv: str = INV_A, priority: int = 6) -> None:
    journal.append([unit_entry(unit, inv, 4242, "python3", text, priority)])


@pytest.mark.parametrize("raw, expected", [
    (b"plain text", "plain text"),
    (b"tab\tis printable", "tab\tis printable"),
    ("unicode \u00e9 ok".encode(), "unicode \u00e9 ok"),
    (b"\x1b[32mcolour\x1b[0m", list(b"\x1b[32mcolour\x1b[0m")),
    (b"bad utf8 \xff\xfe", list(b"bad utf8 \xff\xfe")),
    (b"c1 control \xc2\x9b", list(b"c1 control \xc2\x9b")),
])
def test_message_is_a_string_only_when_printable_utf8(raw, expected):
    assert message_value(raw) == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200).filter(lambda b: b"\n" not in b))
def test_any_bytes_survive_the_round_trip(raw):
    stored = json.dumps({"MESSAGE": message_value(raw)}, ensure_ascii=False).encode()
    shown = json.loads(renderer("json", show_all=True)(stored))["MESSAGE"]
    assert (bytes(shown) if isinstance(shown, list) else shown.encode()) == raw


def test_json_output_has_journald_shape_with_string_values(journal):
    line(journal, b"hello", priority=3)
    (entry,) = entries(jctl(journal, "-o", "json"))
    assert entry["MESSAGE"] == "hello"
    assert entry["PRIORITY"] == "3" and entry["_PID"] == "4242"
    assert entry["_SYSTEMD_UNIT"] == "x.service" and entry["_SYSTEMD_INVOCATION_ID"] == INV_A
    assert entry["__REALTIME_TIMESTAMP"].isdigit() and entry["__CURSOR"].startswith("s=")
    assert all(isinstance(v, str) for v in entry.values())


def test_escape_sequences_come_back_as_byte_arrays(journal):
    line(journal, b"\x1b[31mred\x1b[0m")
    (entry,) = entries(jctl(journal, "-o", "json"))
    assert bytes(entry["MESSAGE"]) == b"\x1b[31mred\x1b[0m"


def test_long_message_is_null_unless_all(journal):
    long = b"x" * 5000
    line(journal, long)
    line(journal, b"y" * 4087)     # "MESSAGE=" and the value: 4095 bytes, shown
    line(journal, b"z" * 4088)     # 4096 bytes: null, as journalctl does
    default = entries(jctl(journal, "-o", "json"))
    assert default[0]["MESSAGE"] is None and default[1]["MESSAGE"] == "y" * 4087 and default[2]["MESSAGE"] is None
    assert entries(jctl(journal, "-o", "json", "--all"))[0]["MESSAGE"] == long.decode()
    assert entries(jctl(journal, "-o", "json", "-a"))[0]["__CURSOR"] == default[0]["__CURSOR"]


def test_cat_output_prints_raw_message_bytes(journal):
    line(journal, b"one")
    line(journal, b"\x1b[1mtwo")
    assert jctl(journal, "-o", "cat").stdout == b"one\n\x1b[1mtwo\n"


def test_after_cursor_resumes_with_no_loss_and_no_duplicate(journal):
    for i in range(3):
        line(journal, f"m{i}".encode())
    first = entries(jctl(journal, "-o", "json"))
    for i in range(3, 6):
        line(journal, f"m{i}".encode())
    rest = entries(jctl(journal, "-o", "json", f"--after-cursor={first[1]['__CURSOR']}"))
    assert [e["MESSAGE"] for e in rest] == ["m2", "m3", "m4", "m5"]
    last = entries(jctl(journal, "-o", "json", "--after-cursor", rest[-1]["__CURSOR"]))
    assert last == []


def test_bad_cursor_is_one_clear_line(journal):
    line(journal, b"m")
    result = jctl(journal, "-o", "json", "--after-cursor=s=nope;i=0")
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.decode().strip() == "Failed to seek to cursor: Invalid argument"


def test_lines_shows_the_last_n(journal):
    for i in range(5):
        line(journal, f"m{i}".encode())
    assert [e["MESSAGE"] for e in entries(jctl(journal, "-o", "json", "-n", "2"))] == ["m3", "m4"]
    assert [e["MESSAGE"] for e in entries(jctl(journal, "-o", "json", "--lines=1"))] == ["m4"]


def test_unit_match_includes_pid1_lines_about_the_unit_only(journal):
    journal.append([pid1_entry("x.service", INV_A, "Started X.")])
    line(journal, b"from x")
    line(journal, b"from y", unit="y.service")
    journal.append([pid1_entry("y.service", INV_B, "Started Y.")])
    got = entries(jctl(journal, "-o", "json", "-u", "x"))
    assert [e["MESSAGE"] for e in got] == ["Started X.", "from x"]
    assert got[0]["_PID"] == "1" and got[0]["UNIT"] == "x.service" and got[0]["_SYSTEMD_UNIT"] == "init.scope"
    both = entries(jctl(journal, "-o", "json", "-u", "x.service", "-u", "y.service"))
    assert len(both) == 4


def test_field_match_selects_one_invocation(journal):
    line(journal, b"old run", inv=INV_A)
    line(journal, b"new run", inv=INV_B)
    got = entries(jctl(journal, "-o", "json", "-u", "x", f"_SYSTEMD_INVOCATION_ID={INV_B}"))
    assert [e["MESSAGE"] for e in got] == ["new run"]


def test_message_text_cannot_fake_a_field_match(journal):
    line(journal, b'"_SYSTEMD_UNIT":"y.service"')
    assert entries(jctl(journal, "-o", "json", "-u", "y")) == []


def test_concurrent_writers_never_interleave_lines(tmp_path):
    def write(tag: str) -> None:
        j = Journal(tmp_path)
        for batch in range(50):
            j.append([unit_entry("x.service", INV_A, 1, "w", f"{tag}{batch}-{i}".encode(), 6) for i in range(20)])
        j.close()

    threads = [threading.Thread(target=write, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    journal = Journal(tmp_path)
    raw = journal.path.read_bytes()
    offset = 0
    for stored in raw.splitlines(keepends=True):
        assert journal.seek(json.loads(stored)["__CURSOR"]) == (offset, True)
        offset += len(stored)
    assert offset == len(raw) and raw.count(b"\n") == 2000


def test_follow_delivers_lines_written_after_it_started(journal, procs: Procs):
    from pdtui.sim.sandbox import Sandbox
    line(journal, b"before")
    argv = [*Sandbox(journal.dir.parent).commands["journalctl"], "-f", "-o", "cat", "-u", "x"]
    follower = procs.start(argv)
    read_until(follower, "before")
    line(journal, b"after 1")
    line(journal, b"other unit", unit="y.service")
    line(journal, b"after 2")
    assert read_until(follower, "after 2") == ["after 1", "after 2"]
    assert procs.stop(follower, signal.SIGTERM) == -signal.SIGTERM    # journalctl has no handler for it


def test_follow_exits_when_its_reader_goes_away(journal, procs: Procs):
    from pdtui.sim.sandbox import Sandbox
    line(journal, b"x")
    follower = procs.start([*Sandbox(journal.dir.parent).commands["journalctl"], "-f", "-o", "json"])
    read_until(follower, "x")
    follower.stdout.close()
    assert follower.wait(10) == 1


def test_unknown_output_format_is_one_line(journal):
    result = jctl(journal, "-o", "yaml")
    assert result.returncode == 1 and result.stderr.decode().strip() == "Unknown output format 'yaml'."


def test_follow_with_pdtui_argv_starts_at_the_end_and_streams_json(journal, procs: Procs):
    from pdtui.sim.sandbox import Sandbox
    line(journal, b"old")
    argv = [*Sandbox(journal.dir.parent).commands["journalctl"], "--follow", "--output=json", "--all", "--no-pager",
            "--quiet", "--lines=0", "--unit=x.service", "--unit=y.service"]
    follower = procs.start(argv)
    for i in range(1000):   # until the follower is seen to be following
        journal.append([pid1_entry("y.service", INV_B, f"ping {i}")])
        if select.select([follower.stdout], [], [], 0.05)[0]:
            break
    line(journal, b"new")
    seen = [json.loads(text)["MESSAGE"] for text in read_until(follower, '"new"')]
    assert seen[0].startswith("ping") and seen[-1] == "new" and "old" not in seen
