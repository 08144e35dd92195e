"""The sim's journalctl stand-in answers as the real journalctl does, for what pdtui asks and reads.

One sandbox with the real journal on: every entry goes to the sim's JSONL
journal (read by the stand-in) and to real journal files (read by the machine's
journalctl with ``--directory``), with the same timestamps. Units run under the
sim's systemctl (their output and systemd's PID-1 lines come from a supervisor)
and the test process appends entries too. Each test runs the same argv through
both and compares the fields pdtui reads.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from pdtui.sim import realjournal
from pdtui.sim.journal import Journal, pid1_entry, unit_entry
from pdtui.sim.sandbox import Sandbox
from pdtui.targets.systemd.commands import Commands
from pdtui.targets.systemd.journal_json import parse_entry
from tests.conftest_sim import Procs, read_until  # noqa: F401 - procs is a fixture

pytestmark = [pytest.mark.xdist_group("journal_conformance"),   # its module fixture once, on one worker
              pytest.mark.skipif(not realjournal.available(),
                                 reason=f"no real journal to compare with: {realjournal.missing_reason()}")]

FIELDS = ("MESSAGE", "_SYSTEMD_UNIT", "UNIT", "_SYSTEMD_INVOCATION_ID", "INVOCATION_ID", "PRIORITY",
          "__REALTIME_TIMESTAMP", "_PID")
"""The fields pdtui reads (:func:`pdtui.targets.systemd.commands.parse_entry`), and how long values are cut."""
ABSENT = "<absent>"
OPTS = ("--output=json", "--all", "--no-pager", "--quiet")

# What units write: text, escapes, bytes that are not UTF-8, control bytes, values around the
# 4096-byte limit of -o json without --all, an empty line, a message faking a field, no last newline.
TRICKY = [b"plain text", b"tab\tis printable", "unicode \u00e9 \u2713".encode(), b"\x1b[31mred\x1b[0m",
          b"bad utf8 \xff\xfe", b"c1 control \xc2\x9b", b"nul \x00 byte", b"carriage \r return", b"",
          b"x" * 5000, b"y" * 4087, b"z" * 4088, b'"_SYSTEMD_UNIT":"b.service"', "\u00e9".encode() * 3000]
PROGRAM = textwrap.dedent("""
    import sys
    lines = {lines!r}
    out, err = sys.stdout.buffer, sys.stderr.buffer
    for i, line in enumerate(lines):
        (err if i % 3 == 2 else out).write(line + b"\\n")
    out.write(b"{name} last line without newline")
""")


class Both:
    """The sandbox, and the two journalctls reading it."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.real = sandbox.commands["journalctl"]
        self.stand_in = sandbox.sim_command("journalctl")
        self.invocations: dict[str, str] = {}

    def run(self, argv: list[str], *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*argv, *args], capture_output=True, timeout=30)

    def both(self, *args: str) -> tuple[subprocess.CompletedProcess[bytes], subprocess.CompletedProcess[bytes]]:
        return self.run(self.real, *args), self.run(self.stand_in, *args)

    def json(self, argv: list[str], *args: str) -> list[dict]:
        result = self.run(argv, *args)
        assert result.returncode == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines()]

    def entries(self, *args: str) -> tuple[list[dict], list[dict]]:
        real, stand_in = self.both(*args)
        assert real.returncode == 0 and stand_in.returncode == 0, (real.stderr, stand_in.stderr)
        return ([json.loads(line) for line in real.stdout.splitlines()],
                [json.loads(line) for line in stand_in.stdout.splitlines()])


def project(entries: list[dict]) -> list[dict]:
    return [{field: entry.get(field, ABSENT) for field in FIELDS} for entry in entries]


def assert_same(real: list[dict], stand_in: list[dict]) -> None:
    assert project(stand_in) == project(real)
    for r, s in zip(real, stand_in, strict=False):    # the same fields, whatever their values
        assert set(s) == set(r), (set(s) ^ set(r))
    parsed_real = [parse_entry(json.dumps(e)) for e in real]
    parsed_stand_in = [parse_entry(json.dumps(e)) for e in stand_in]
    for r, s in zip(parsed_real, parsed_stand_in, strict=False):
        r.cursor = s.cursor = None
    assert parsed_stand_in == parsed_real


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> Both:
    sandbox = Sandbox.create(tmp_path_factory.mktemp("conformance") / "sim", real_journal=True)
    pair = Both(sandbox)
    systemctl = sandbox.commands["systemctl"]
    try:
        for name in ("a", "b", "c"):    # one after the other: one order of entries for both to show
            script = sandbox.root / f"{name}.py"
            script.write_text(PROGRAM.format(lines=TRICKY, name=name))
            sandbox.add_unit(name, [sys.executable, str(script)])
            subprocess.run([*systemctl, "start", name], check=True, timeout=30)
            deadline = time.monotonic() + 30
            while subprocess.run([*systemctl, "is-active", name], capture_output=True).returncode == 0:
                assert time.monotonic() < deadline, f"{name} never ended"
                time.sleep(0.02)
            show = subprocess.run([*systemctl, "show", "-p", "InvocationID", name], capture_output=True,
                                  text=True, check=True).stdout
            pair.invocations[name] = show.strip().partition("=")[2]
        journal = Journal(sandbox.root)     # entries from this process: the dict-encoding path
        try:
            journal.append([pid1_entry("a.service", "d" * 32, "Started A again.")])
            journal.append([unit_entry("a.service", "d" * 32, 4242, "python3", raw, 6) for raw in TRICKY])
        finally:
            journal.close()
        yield pair
    finally:
        sandbox.cleanup()


def test_one_journal_remote_writes_one_file_for_all_writers(both):
    assert realjournal.remote_running(both.sandbox.root) is not None
    assert [p.name for p in realjournal.real_dir(both.sandbox.root).glob("*.journal")] == [realjournal.FILE]


@pytest.mark.parametrize("args", [
    (*OPTS,),
    (*OPTS, "--unit=a.service", "--unit=b.service"),
    (*OPTS, "-u", "a"),
    ("--output=json", "--no-pager", "--quiet", "-u", "a", "-u", "b"),    # without --all: long values are null
    ("-o", "json"),
    ("-o", "json", "-n", "3", "-u", "c"),
], ids=["all", "two-units", "short-unit-name", "no-all", "everything-no-all", "last-3"])
def test_same_entries_for_the_same_query(both, args):
    real, stand_in = both.entries(*args)
    assert real, "the query selects something"
    assert_same(real, stand_in)


@pytest.mark.parametrize("args", [
    ("--grep=(?:tab)|(?:last line)", "--case-sensitive=true"),     # as pdtui reads an attached unit's old lines
    ("--grep=PLAIN", "--case-sensitive=false"),
    ("--grep=unicode",),                                           # no capital letter: case is ignored
    ("--grep=Unicode",),                                           # a capital: case counts, nothing matches
], ids=["alternation", "insensitive", "smart-lower", "smart-upper"])
def test_grep_selects_the_same_entries(both, args):
    query = (*OPTS, "-u", "a", "-u", "b", *args)
    if args == ("--grep=Unicode",):    # nothing matched: exit 1, nothing said
        results = [both.run(argv, *query) for argv in (both.real, both.stand_in)]
        assert [(r.returncode, r.stdout, r.stderr) for r in results] == [(1, b"", b"")] * 2
        return
    real, stand_in = both.entries(*query)
    assert real
    assert_same(real, stand_in)


def test_since_and_until_in_seconds_select_the_same_entries(both):
    every = both.json(both.real, *OPTS, "-u", "a", "-u", "b")
    stamps = sorted(int(e["__REALTIME_TIMESTAMP"]) for e in every)
    low, high = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    window = (f"--since=@{low / 1e6:.6f}", f"--until=@{high / 1e6:.6f}")
    real, stand_in = both.entries(*OPTS, "-u", "a", "-u", "b", *window)
    assert 0 < len(real) < len(every)
    assert all(low <= int(e["__REALTIME_TIMESTAMP"]) <= high for e in real)
    assert_same(real, stand_in)


def test_no_all_shows_long_values_as_null_and_bytes_as_arrays(both):
    real, stand_in = both.entries("-o", "json", "-u", "a", f"_SYSTEMD_INVOCATION_ID={both.invocations['a']}")
    for entries in (real, stand_in):
        messages = [e["MESSAGE"] for e in entries]
        assert messages.count(None) == 3          # x*5000, z*4088 ("MESSAGE=" makes it 4096), é*3000 (6000 bytes)
        assert list(b"\x1b[31mred\x1b[0m") in messages and list(b"bad utf8 \xff\xfe") in messages
        assert "y" * 4087 in messages


def test_invocation_history_as_pdtui_asks(both):
    commands = Commands(journalctl_prefix=())
    inv_a, inv_b = both.invocations["a"], both.invocations["b"]
    one = commands.invocation_history([inv_a])
    assert_same(*both.entries(*one))
    # InvocationHistory asks for several invocations at once: matches of one field are OR-ed, "+" ORs the groups.
    several = commands.invocation_history([inv_a, inv_b])
    real, stand_in = both.entries(*several)
    assert {e.get("_SYSTEMD_INVOCATION_ID") or e["INVOCATION_ID"] for e in real} == {inv_a, inv_b}
    assert_same(real, stand_in)
    without_all = commands.journalctl("--output=json", "--quiet", f"_SYSTEMD_INVOCATION_ID={inv_b}")
    assert_same(*both.entries(*without_all))


def test_invocation_history_up_to_a_microsecond_includes_the_entries_stamped_with_it(both):
    whole, _ = both.entries(*OPTS, "-u", "a")
    for k in (0, len(whole) // 2, len(whole) - 1):
        stamp = int(whole[k]["__REALTIME_TIMESTAMP"])
        until = parse_entry(json.dumps(whole[k])).realtime
        real, stand_in = both.entries(*OPTS, "-u", "a", f"--until=@{until:.6f}")
        assert_same(real, stand_in)
        assert project(real) == project([e for e in whole if int(e["__REALTIME_TIMESTAMP"]) <= stamp])
        assert real[-1]["__REALTIME_TIMESTAMP"] == str(stamp)


def test_after_cursor_resumes_at_the_same_entry(both):
    real, stand_in = both.entries(*OPTS, "-u", "a", "-u", "b")
    for k in (0, 5, len(real) - 2, len(real) - 1):
        # Each journalctl is given a cursor it printed itself.
        rest_real = both.json(both.real, *OPTS, "-u", "a", "-u", "b", f"--after-cursor={real[k]['__CURSOR']}")
        rest_stand_in = both.json(both.stand_in, *OPTS, "-u", "a", "-u", "b",
                                  f"--after-cursor={stand_in[k]['__CURSOR']}")
        assert_same(rest_real, rest_stand_in)
        assert project(rest_real) == project(real[k + 1:])


@pytest.mark.parametrize("cursor", ["garbage", "s=nope;i=0", ""])
def test_a_bad_cursor_is_the_same_one_line_and_exit_1(both, cursor):
    for follow in ((), ("--follow",)):
        real, stand_in = both.both(*OPTS, *follow, f"--after-cursor={cursor}", "-u", "a")
        assert (stand_in.returncode, stand_in.stdout, stand_in.stderr) == (real.returncode, real.stdout, real.stderr)
        assert real.returncode == 1 and real.stderr.strip() == b"Failed to seek to cursor: Invalid argument"


def test_an_empty_journal(tmp_path):
    empty = tmp_path / "empty"
    realjournal.real_dir(empty).mkdir(parents=True)
    real_argv = Sandbox(empty).commands["journalctl"]
    stand_in_argv = Sandbox(empty).sim_command("journalctl")
    commands = Commands(journalctl_prefix=())
    follows = (commands.follow(["a.service"]), commands.follow(["a.service"], recent=10.0),
               ["--follow", *OPTS, "--lines=0", "-u", "a"])
    for args in (*follows, (*OPTS,), ("-o", "json", "-u", "a"), commands.last_entry()):
        real = subprocess.run([*real_argv, *args], capture_output=True, timeout=30)
        stand_in = subprocess.run([*stand_in_argv, *args], capture_output=True, timeout=30)
        assert (stand_in.returncode, stand_in.stdout, stand_in.stderr) == (real.returncode, real.stdout, real.stderr)


def _follow_both(both: Both, procs: Procs, args: list[str], tag: str) -> tuple[list[dict], list[dict]]:
    """Follow with ``args`` in both, write new entries once both follow; what each printed up to the last."""
    followers = [procs.start([*argv, *args]) for argv in (both.real, both.stand_in)]
    journal = Journal(both.sandbox.root)
    try:
        pings = 0
        seen: list[list[str]] = [[], []]
        # Until both show a ping: each follows by then.
        waiting = set(range(2))
        while waiting:
            journal.append([unit_entry("b.service", "p" * 32, 7, "w", f"{tag} ping {pings}".encode(), 6)])
            pings += 1
            for i in list(waiting):
                if select.select([followers[i].stdout], [], [], 0.05)[0]:
                    read_until(followers[i], f"{tag} ping", seen[i])
                    waiting.discard(i)
        journal.append([unit_entry("b.service", "p" * 32, 7, "w", f"{tag} ping {pings}".encode(), 6)])
        new = [unit_entry("a.service", "e" * 32, 9, "w", raw, 3) for raw in TRICKY]
        new.append(pid1_entry("a.service", "e" * 32, "a.service: Deactivated successfully."))
        new.append(unit_entry("c.service", "f" * 32, 9, "w", b"not followed", 6))
        new.append(unit_entry("b.service", "f" * 32, 9, "w", f"{tag} end".encode(), 6))
        journal.append(new)
        for i in range(2):
            read_until(followers[i], f"{tag} end", seen[i])
    finally:
        journal.close()
    for follower in followers:
        procs.stop(follower)
    return [json.loads(line) for line in seen[0]], [json.loads(line) for line in seen[1]]


@pytest.mark.parametrize("recent", [None, 3600.0], ids=["from-the-head", "an-hour-back"])
def test_follow_without_a_cursor_as_pdtui_does(both, procs, recent):
    before, _ = both.entries(*OPTS, "-u", "a", "-u", "b")
    args = Commands(journalctl_prefix=()).follow(["a.service", "b.service"], recent=recent)
    real, stand_in = _follow_both(both, procs, args, f"fresh {recent}")
    messages = [e["MESSAGE"] for e in real]
    assert messages[-1] == f"fresh {recent} end" and "not followed" not in messages
    # Everything the two units had logged comes first (the fixture wrote it all within the hour).
    assert project(real[:len(before)]) == project(before)
    assert_same(real, stand_in)


def test_follow_after_a_cursor_as_pdtui_does(both, procs):
    real_all, stand_in_all = both.entries(*OPTS, "-u", "a", "-u", "b")
    k = len(real_all) - 4
    commands = Commands(journalctl_prefix=())
    followers_args = (commands.follow(["a.service", "b.service"], real_all[k]["__CURSOR"]),
                      commands.follow(["a.service", "b.service"], stand_in_all[k]["__CURSOR"]))
    # Each journalctl resumes from a cursor it gave: that entry and the backlog first, then the new entries.
    outputs = []
    for argv, args in zip((both.real, both.stand_in), followers_args, strict=False):
        follower = procs.start([*argv, *args])
        journal = Journal(both.sandbox.root)
        try:
            journal.append([unit_entry("a.service", "g" * 32, 9, "w", f"resumed {argv is both.real}".encode(), 6)])
        finally:
            journal.close()
        lines = read_until(follower, f"resumed {argv is both.real}")
        procs.stop(follower)
        outputs.append([json.loads(line) for line in lines])
    real, stand_in = outputs
    assert project(real[:4]) == project(real_all[k:k + 4])
    assert_same(real[:4], stand_in[:4])


def test_stop_all_leaves_no_journal_remote_behind_and_a_later_writer_starts_it_again(tmp_path):
    sandbox = Sandbox.create(tmp_path / "sim", real_journal=True)
    sandbox.add_unit("long", [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    subprocess.run([*sandbox.commands["systemctl"], "start", "long"], check=True, timeout=30)
    forgotten = Journal(sandbox.root)          # never closed: its connection stays open
    forgotten.append([unit_entry("x.service", "a" * 32, 1, "w", b"left open", 6)])
    remote = realjournal.remote_running(sandbox.root)
    assert remote is not None
    sandbox.stop_all()
    assert not remote.alive() and realjournal.remote_running(sandbox.root) is None
    again = Journal(sandbox.root)              # the sandbox is used again after stop_all
    again.append([unit_entry("x.service", "a" * 32, 1, "w", b"again", 6)])
    again.close()
    out = subprocess.run([*sandbox.commands["journalctl"], "-o", "cat", "-u", "x"], capture_output=True,
                         text=True, timeout=30).stdout.splitlines()
    assert out == ["left open", "again"]
    sandbox.cleanup()
    assert realjournal.remote_running(sandbox.root) is None


def test_a_dead_journal_remote_loses_entries_but_not_the_writer(tmp_path, capfd):
    sandbox = Sandbox.create(tmp_path / "sim", real_journal=True)
    journal = Journal(sandbox.root)
    try:
        journal.append([unit_entry("x.service", "a" * 32, 1, "w", b"before", 6)])
        remote = realjournal.remote_running(sandbox.root)
        os.kill(remote.pid, signal.SIGKILL)
        for i in range(3):     # no BrokenPipeError, one message
            journal.append([unit_entry("x.service", "a" * 32, 1, "w", b"after %d" % i, 6)])
        assert capfd.readouterr().err.count("journal-remote is gone") == 1
    finally:
        journal.close()
        sandbox.cleanup()


def test_a_broken_connection_loses_only_its_own_entries(tmp_path):
    sandbox = Sandbox.create(tmp_path / "sim", real_journal=True)
    try:
        broken, other = Journal(sandbox.root), Journal(sandbox.root)
        broken.append([unit_entry("x.service", "a" * 32, 1, "w", b"one", 6)])
        broken.real_writer()._sock.shutdown(socket.SHUT_RDWR)
        broken.append([unit_entry("x.service", "a" * 32, 1, "w", b"lost", 6)])
        other.append([unit_entry("x.service", "a" * 32, 1, "w", b"two", 6)])
        out = subprocess.run([*sandbox.commands["journalctl"], "-o", "cat", "-u", "x"], capture_output=True,
                             text=True, timeout=30).stdout.splitlines()
        assert out == ["one", "two"]
        broken.close()
        other.close()
    finally:
        sandbox.cleanup()


def test_concurrent_writers_land_in_one_file_stamped_in_file_order(tmp_path, procs):
    sandbox = Sandbox.create(tmp_path / "sim", real_journal=True)
    try:
        begin = Journal(sandbox.root)
        begin.append([unit_entry("x.service", "a" * 32, 1, "w", b"begin", 6)])
        begin.close()
        # From a matching entry on (-f on a unit with none yet shows only the last 10 of its first lines).
        follower = procs.start([*sandbox.commands["journalctl"], "-f", "-o", "json", "--lines=1", "-u", "x"])
        read_until(follower, '"begin"')
        script = ("import sys\nfrom pdtui.sim.journal import Journal, unit_entry\n"
                  "j = Journal(sys.argv[1])\n"
                  "for i in range(150):\n"
                  "    j.append([unit_entry('x.service', 'a' * 32, 1, 'w', f'{sys.argv[2]} {i}'.encode(), 6)])\n"
                  "j.close()\n")
        writers = [subprocess.Popen([sys.executable, "-c", script, str(sandbox.root), f"w{n}"]) for n in range(4)]
        assert [w.wait(60) for w in writers] == [0] * 4
        end = Journal(sandbox.root)
        end.append([unit_entry("x.service", "a" * 32, 1, "w", b"end", 6)])
        end.close()
        seen = [json.loads(line) for line in read_until(follower, '"end"')]
        assert sorted(e["MESSAGE"] for e in seen[:-1]) == sorted(f"w{n} {i}" for n in range(4) for i in range(150))
        entries = both_json(sandbox)
        for key in ("__MONOTONIC_TIMESTAMP", "__REALTIME_TIMESTAMP"):
            stamps = [int(e[key]) for e in entries]
            assert stamps == sorted(set(stamps)), key     # in file order, none twice
    finally:
        sandbox.cleanup()


def both_json(sandbox: Sandbox) -> list[dict]:
    out = subprocess.run([*sandbox.commands["journalctl"], "-o", "json", "--no-pager"], capture_output=True,
                         timeout=30, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_a_cursor_whose_entry_was_vacuumed_away_seeks_to_the_nearest_entry_in_both(tmp_path):
    sandbox = Sandbox.create(tmp_path / "sim", real_journal=True)
    pair = Both(sandbox)
    try:
        journal = Journal(sandbox.root)
        try:
            journal.append([unit_entry("a.service", "e" * 32, 5, "w", f"old {i}".encode(), 6) for i in range(5)])
            real, stand_in = pair.entries(*OPTS, "-u", "a")
            sandbox.rotate_journal(remove=True)
            journal.append([unit_entry("a.service", "e" * 32, 5, "w", f"new {i}".encode(), 6) for i in range(3)])
        finally:
            journal.close()
        for option, shown in (("--cursor", ["new 0", "new 1", "new 2"]), ("--after-cursor", ["new 1", "new 2"])):
            # journalctl 252 takes the nearest entry for the cursor's: --after-cursor skips it
            got_real = pair.json(pair.real, *OPTS, "-u", "a", f"{option}={real[2]['__CURSOR']}")
            got_stand_in = pair.json(pair.stand_in, *OPTS, "-u", "a", f"{option}={stand_in[2]['__CURSOR']}")
            assert [e["MESSAGE"] for e in got_real] == shown
            assert_same(got_real, got_stand_in)
    finally:
        sandbox.cleanup()
