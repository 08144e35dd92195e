"""The stand-ins (pdtui/sim's systemctl, supervisor and journal) answer as a real systemd 252 and journald do.

Each test installs the same unit files on both sides: a sandbox, whose stand-in
systemctl and journalctl pdtui reaches through a LocalHost, and a container
booted with a real systemd (tests/systemd_host.py), reached over real SSH
through an SshHost, as pdtui reaches any host. Both are driven with the argvs
pdtui builds (:class:`pdtui.targets.systemd.commands.Commands`), and what pdtui's own parsers
make of the answers is compared: values where systemd's are deterministic
(states, exit codes, NRestarts, Result, LoadState, messages), shapes where they
are not (PIDs, invocation IDs, timestamps, cursors).

The sandbox reads its journal with the stand-in journalctl: that the real
journalctl reads the sim's journal files alike is test_journal_conformance's.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import pytest
import pytest_asyncio

from pdtui.engine.log_entry import LogEntry
from pdtui.hosts import Host, Result, make_host
from pdtui.sim import systemd_host as container
from pdtui.sim.sandbox import Sandbox
from pdtui.sim.systemd_host import SystemdHost
from pdtui.targets.systemd.commands import SHOW_PROPERTIES, Commands, parse_cat, parse_show_units, parse_timestamp
from pdtui.targets.systemd.journal_json import parse_entry
from pdtui.targets.systemd.settings import HostConfig
from pdtui.targets.systemd.unit_drift import parse_installed
from tests.sshd import SshHome

T = TypeVar("T")

WAIT = 20.0
"""How long a unit may take to reach the state a test waits for (a bound, not a measure)."""
REAL_UNIT_DIR = "/etc/systemd/system"
WRITE = 'while [ "$#" -gt 1 ]; do mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1" || exit; shift 2; done'
"""sh script writing each file $1 with the text $2 given after it: one command, alike through a LocalHost and an
SshHost (each command over SSH costs a fifth of a second here)."""


@dataclass
class Side:
    """One systemd, stand-in or real, as pdtui reaches it."""

    name: str
    host: Host
    commands: Commands
    unit_dir: str

    async def run(self, argv: list[str]) -> Result:
        return await self.host.run(argv, timeout=60)

    async def systemctl(self, *args: str) -> Result:
        return await self.run(self.commands.systemctl(*args))

    async def install(self, files: Mapping[str, str]) -> None:
        """Unit files (and drop-ins) by path under the unit folder, then ``daemon-reload``."""
        pairs = [word for path, text in files.items() for word in (f"{self.unit_dir}/{path}", text)]
        result = await self.run(["sh", "-c", WRITE, "sh", *pairs])
        assert result.ok, result.stderr
        assert (await self.systemctl("daemon-reload")).ok

    async def show(self, units: list[str], properties: tuple[str, ...] = SHOW_PROPERTIES) -> dict[str, dict[str, str]]:
        result = await self.run(self.commands.show(units, properties))
        assert result.ok, result.stderr
        return parse_show_units(result.stdout)

    async def until(self, unit: str, done: Callable[[dict[str, str]], bool], what: str) -> dict[str, str]:
        """The unit's properties once ``done`` holds for them; the test fails when it never does."""
        deadline = time.monotonic() + WAIT
        while True:
            props = (await self.show([unit], (*SHOW_PROPERTIES, "Result")))[unit]
            if done(props):
                return props
            if time.monotonic() > deadline:
                pytest.fail(f"{self.name}: {unit} not {what} within {WAIT:g}s: {props}")
            await asyncio.sleep(0.05)

    async def journal(self, argv: list[str]) -> list[LogEntry]:
        result = await self.run(argv)
        assert result.ok, result.stderr
        entries = [parse_entry(line) for line in result.stdout.splitlines()]
        assert None not in entries, result.stdout
        return entries     # type: ignore[return-value]


@dataclass
class World:
    """The two systemds of this module's tests, each test's units named apart: one boot for all (0.5 s each)."""

    container: SystemdHost
    sandbox: Sandbox
    scenes: set[str]


pytestmark = pytest.mark.xdist_group("systemd_conformance")   # its module fixture once, on one worker


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    reason = container.missing_reason()
    if reason:
        pytest.skip(f"no real systemd: {reason}")
    host = container.boot(tmp_path_factory.mktemp("container"))
    try:
        with Sandbox.create(tmp_path_factory.mktemp("sandbox") / "sim", real_journal=False) as sandbox:
            yield World(host, sandbox, set())
    finally:
        host.stop()


@dataclass
class Both:
    stand_in: Side
    real: Side
    world: World

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.stand_in, self.real

    async def each(self, call: Callable[[Side], Awaitable[T]]) -> list[T]:
        """``call`` on the stand-in, then on the real one."""
        return [await call(side) for side in self.sides]

    async def scene(self, name: str, build: Callable[[Side], Awaitable[None]]) -> None:
        """``build`` on each side, once for the module: the tests that read the same units share them."""
        if name not in self.world.scenes:
            await self.each(build)
            self.world.scenes.add(name)


@pytest_asyncio.fixture
async def both(world: World, ssh_home: SshHome) -> AsyncIterator[Both]:
    """Both sides as pdtui reaches them: the stand-in through a LocalHost, the real one over SSH."""
    ssh_home.use_key(world.container.client_key)
    with ssh_home.known_hosts.open("a") as out:
        out.write(world.container.known_hosts_line)
    local = HostConfig(name="stand-in", local=True, commands=world.sandbox.commands)
    remote = HostConfig(name="real", address="127.0.0.1", port=world.container.port, user="root")
    pair = Both(Side("stand-in", make_host(local), Commands.for_host(local), str(world.sandbox.store.units_dir)),
                Side("real", make_host(remote), Commands.for_host(remote), REAL_UNIT_DIR), world)
    try:
        yield pair
    finally:
        for side in pair.sides:
            await side.host.close()


def unit_file(exec_start: str, *, description: str = "", unit: str = "", service: str = "",
              install: bool = False) -> str:
    """A unit file's text: ExecStart and what else a test sets."""
    head = [*([f"Description={description}"] if description else []), *([unit] if unit else [])]
    return "\n".join(["[Unit]", *head, "", "[Service]", f"ExecStart={exec_start}", *([service] if service else []),
                      *(["", "[Install]", "WantedBy=multi-user.target"] if install else []), ""])


# -- units in each state -----------------------------------------------------------

SLEEP = "/bin/sleep 600"
STATES = {
    "running": unit_file(SLEEP),
    "stopped": unit_file(SLEEP, install=True),
    "failed": unit_file("/bin/sh -c 'echo bye; exit 7'"),
    "activating": unit_file("/bin/sh -c 'exit 3'", service="Restart=on-failure\nRestartSec=600"),
}
"""A unit per state. ``activating``: failed once, waiting 600 s to be restarted (SubState=auto-restart).

``stopped`` is enabled: systemd keeps it loaded once stopped, with its last InvocationID, ActiveEnterTimestamp and
ExecMainStatus, as the stand-in keeps every unit. One nothing refers to, systemd unloads: show then answers as for a
unit never started (no InvocationID, ExecMainStatus=0); the stand-in does not unload units (but for the start
limit, see test_a_stopped_unit_nothing_refers_to_starts_again_whatever_its_start_limit)."""


async def in_states(both: Both) -> None:
    """Every unit of STATES in its state on both sides, and ``not-found.service`` on neither."""
    async def bring(side: Side) -> None:
        await side.install({f"{name}.service": text for name, text in STATES.items()})
        assert (await side.systemctl("enable", "stopped.service")).ok
        assert (await side.systemctl("start", *(f"{name}.service" for name in STATES))).ok
        assert (await side.systemctl("stop", "stopped.service")).ok
        await side.until("failed.service", lambda p: p["ActiveState"] == "failed", "failed")
        await side.until("activating.service", lambda p: p["SubState"] == "auto-restart", "waiting to restart")
    await both.scene("states", bring)


UNIT_STATES = [*STATES, "not-found"]
DETERMINISTIC = ("Id", "LoadState", "ActiveState", "SubState", "NRestarts", "ExecMainStatus", "Result", "LimitMEMLOCK",
                 "User")


def shape(props: Mapping[str, str]) -> dict[str, str]:
    """What of a unit's properties must agree: deterministic values as they are, the others by their shape."""
    found = {key: props[key] for key in DETERMINISTIC if key in props}
    found["MainPID"] = "0" if props["MainPID"] == "0" else "a PID" if props["MainPID"].isdigit() else props["MainPID"]
    invocation = props["InvocationID"]
    found["InvocationID"] = "an ID" if re.fullmatch("[0-9a-f]{32}", invocation) else invocation
    stamp = props["ActiveEnterTimestamp"]
    found["ActiveEnterTimestamp"] = "a time" if stamp and parse_timestamp(stamp) is not None else stamp
    return found


@pytest.mark.parametrize("state", UNIT_STATES)
async def test_show_reports_a_unit_in_each_state_alike(both, state):
    await in_states(both)
    unit = f"{state}.service"
    stand_in, real = await both.each(lambda side: side.show([unit]))
    assert set(real) == {unit} and set(real[unit]) == set(SHOW_PROPERTIES)
    assert set(stand_in[unit]) == set(real[unit])
    assert shape(stand_in[unit]) == shape(real[unit])


async def test_show_of_several_units_answers_for_each_alike(both):
    """One ``systemctl show`` for all of a host's units, as pdtui's UnitLooker asks, the not-found one included."""
    await in_states(both)
    units = [f"{state}.service" for state in UNIT_STATES]
    stand_in, real = await both.each(lambda side: side.show(units, (*SHOW_PROPERTIES, "Result")))
    assert list(real) == units
    assert {u: shape(p) for u, p in stand_in.items()} == {u: shape(p) for u, p in real.items()}


LIMITS = {"unlimited": "LimitMEMLOCK=infinity", "pinned": "LimitMEMLOCK=64M\nUser=nobody",
          "soft-hard": "LimitMEMLOCK=1M:2G", "default": ""}


async def test_show_reports_a_units_locked_memory_limit_and_user_alike(both):
    """What the fabric check reads of a unit: the memory it may pin (bytes, or infinity; the hard limit; systemd's
    default without its own) and the user it runs as."""
    async def install(side: Side) -> None:
        await side.install({f"{name}.service": unit_file(SLEEP, service=line) for name, line in LIMITS.items()})
    await both.scene("limits", install)
    units = [f"{name}.service" for name in LIMITS]
    stand_in, real = await both.each(lambda side: side.show(units, ("Id", "LimitMEMLOCK", "User")))
    assert stand_in == real
    assert real["unlimited.service"]["LimitMEMLOCK"] == "infinity"
    assert real["pinned.service"] == {"Id": "pinned.service", "LimitMEMLOCK": str(64 << 20), "User": "nobody"}


@pytest.mark.parametrize("state", UNIT_STATES)
async def test_is_active_prints_the_same_state_with_the_same_exit_status(both, state):
    await in_states(both)

    async def is_active(side: Side) -> tuple[str, int]:
        result = await side.run(side.commands.is_active(f"{state}.service"))
        return result.stdout, result.exit_status
    stand_in, real = await both.each(is_active)
    assert stand_in == real


# -- the journal -----------------------------------------------------------------

OPTS = ("--output=json", "--all", "--no-pager", "--quiet")
COLOURED = "\x1b[32mgreen\x1b[0m text"
JOURNALED = unit_file(
    '/usr/bin/python3 -c "import sys, time; print(\'to stdout\', flush=True); '
    'print(\'to stderr\', file=sys.stderr, flush=True); print(\'<4>with a level prefix\', flush=True); '
    'print(chr(27) + \'[32mgreen\' + chr(27) + \'[0m text\', flush=True); time.sleep(0.3); sys.exit(1)"',
    description="Journaled")
"""Lines on stdout and on stderr, one with a syslog level prefix, one in ANSI colours; then a failure.

It lives on a moment after its last line: journald reads the metadata of a line from its process, and a line
of one already gone can lack _SYSTEMD_INVOCATION_ID (seen on a unit that printed and exited at once)."""
OWN_LINES = ["to stdout", "to stderr", "with a level prefix", COLOURED]


async def journaled(both: Both) -> None:
    async def run(side: Side) -> None:
        await side.install({"journaled.service": JOURNALED})
        assert (await side.systemctl("start", "journaled.service")).ok
        await side.until("journaled.service", lambda p: p["ActiveState"] == "failed", "failed")
    await both.scene("journaled", run)


def summary(entries: list[LogEntry]) -> dict[str, list[tuple]]:
    """What pdtui reads of a unit's entries: systemd's own lines and the unit's, each in its order (journald
    may put a unit's first line before systemd's ``Started``), every field but the cursor and the time; each
    invocation as the how-manieth run it is."""
    runs = invocations(entries)

    def fields(e: LogEntry) -> tuple:
        return e.message, e.priority, e.source, f"run {runs.index(e.invocation) + 1}" if e.invocation else None
    assert all(e.cursor and isinstance(e.realtime, float) for e in entries)
    return {"systemd": [fields(e) for e in entries if e.system], "unit": [fields(e) for e in entries if not e.system]}


def invocations(entries: list[LogEntry]) -> list[str]:
    """The invocation IDs of ``entries``, in the order they first appear."""
    return list(dict.fromkeys(e.invocation for e in entries if e.invocation))


async def invocation_of(side: Side, unit: str) -> str:
    return (await side.show([unit]))[unit]["InvocationID"]


async def test_a_units_run_is_journaled_with_the_same_fields(both):
    await journaled(both)

    async def read(side: Side) -> dict[str, list[tuple]]:
        entries = await side.journal(side.commands.journalctl(*OPTS, "--unit=journaled.service"))
        assert invocations(entries) == [await invocation_of(side, "journaled.service")]
        return summary(entries)
    stand_in, real = await both.each(read)
    assert [line[0] for line in real["unit"]] == OWN_LINES
    assert stand_in == real


async def test_an_invocations_history_holds_the_units_own_lines_and_systemds_about_that_run(both):
    """pdtui's backfill (``_SYSTEMD_INVOCATION_ID=ID + INVOCATION_ID=ID``): systemd's lines about the run carry
    INVOCATION_ID, the unit's own _SYSTEMD_INVOCATION_ID; the ``+`` reads both, alike on either side."""
    await journaled(both)

    async def read(side: Side) -> dict[str, list[tuple]]:
        invocation = await invocation_of(side, "journaled.service")
        entries = await side.journal(side.commands.invocation_history([invocation]))
        assert invocations(entries) == [invocation]
        return summary(entries)
    stand_in, real = await both.each(read)
    assert real["systemd"] and [line[0] for line in real["unit"]] == OWN_LINES
    assert stand_in == real


async def test_a_message_in_ansi_colours_is_a_byte_array_decoded_to_the_same_text(both):
    await journaled(both)

    async def coloured(side: Side) -> tuple[object, str]:
        result = await side.run(side.commands.journalctl(*OPTS, "--unit=journaled.service", "--grep=green"))
        [line] = result.stdout.splitlines()
        entry = parse_entry(line)
        assert entry is not None
        return json.loads(line)["MESSAGE"], entry.message
    stand_in, real = await both.each(coloured)
    assert real == (list(COLOURED.encode()), COLOURED)
    assert stand_in == real


async def test_following_from_a_cursor_begins_with_the_entry_it_names(both):
    """pdtui's resumed tail (``--follow --cursor=C --no-tail``): C's own entry first (pdtui drops it), then on."""
    await journaled(both)

    async def follow(side: Side) -> tuple[bool, dict[str, list[tuple]]]:
        every = await side.journal(side.commands.journalctl(*OPTS, "--unit=journaled.service"))
        cursor = every[0].cursor
        seen: list[LogEntry] = []
        async with asyncio.timeout(WAIT), side.host.stream(side.commands.follow(["journaled.service"], cursor)) as lines:
            async for line in lines:
                entry = parse_entry(line)
                assert entry is not None, line
                seen.append(entry)
                if len(seen) == len(every):
                    break
        return seen[0].cursor == cursor, summary(seen)
    stand_in, real = await both.each(follow)
    assert real[0] and [line[0] for line in real[1]["unit"]] == OWN_LINES
    assert stand_in == real


# -- Restart= and the start limit --------------------------------------------------------

LOOPER = unit_file("/bin/sh -c 'echo try; sleep 0.2; exit 3'", description="Looper",
                   unit="StartLimitIntervalSec=600\nStartLimitBurst=3", service="Restart=on-failure\nRestartSec=0.1")
"""Fails at every run, restarted at once: as pdtui's generated units, 3 starts in 10 minutes at most."""
LOOPED = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code", "NRestarts": "3",
          "ExecMainStatus": "3", "MainPID": "0", "InvocationID": "an ID"}


async def test_restart_on_failure_runs_until_the_start_limit_then_a_start_fails_alike(both):
    async def loop(side: Side) -> tuple:
        await side.install({"looper.service": LOOPER})
        assert (await side.systemctl("start", "looper.service")).ok
        props = await side.until("looper.service", lambda p: p["ActiveState"] == "failed", "failed")
        entries = await side.journal(side.commands.journalctl(*OPTS, "--unit=looper.service"))
        assert invocations(entries)[-1] == props["InvocationID"]
        again = await side.systemctl("start", "looper.service")
        after = (await side.show(["looper.service"], (*SHOW_PROPERTIES, "Result")))["looper.service"]
        return shape(props), summary(entries), (again.exit_status, again.stderr, again.last_words), shape(after)
    stand_in, real = await both.each(loop)
    looped, journal, again, after = real
    assert looped.items() >= LOOPED.items() and after == looped and again[0] == 1
    assert {line[3] for line in journal["systemd"]} == {"run 1", "run 2", "run 3"}
    assert [line[0] for line in journal["systemd"][-3:]] == [
        "looper.service: Start request repeated too quickly.", "looper.service: Failed with result 'exit-code'.",
        "Failed to start looper.service - Looper."]
    assert stand_in == real


LIMITED = unit_file(SLEEP, unit="StartLimitIntervalSec=600\nStartLimitBurst=1")


async def test_a_restart_over_the_start_limit_fails_with_the_same_words(both):
    """pdtui's RESTART of a unit that ran cleanly: it had no failure to keep, its Result becomes start-limit-hit."""
    async def over(side: Side) -> tuple:
        await side.install({"limited.service": LIMITED})
        assert (await side.systemctl("start", "limited.service")).ok
        again = await side.run(side.commands.restart("limited.service"))
        props = (await side.show(["limited.service"], (*SHOW_PROPERTIES, "Result")))["limited.service"]
        return again.exit_status, again.stderr, shape(props)
    stand_in, real = await both.each(over)
    assert real[0] == 1 and real[2]["Result"] == "start-limit-hit"
    assert stand_in == real


async def test_a_stopped_unit_nothing_refers_to_starts_again_whatever_its_start_limit(both):
    """systemd unloads an inactive unit no other unit refers to (not enabled), and its start limit goes with it:
    ``pdtui down`` then ``up`` within the limit's window starts the backends again."""
    async def again(side: Side) -> tuple:
        await side.install({"unloaded.service": LIMITED})
        for verb in ("start", "stop", "start"):
            assert (await side.systemctl(verb, "unloaded.service")).ok, verb
        return shape((await side.show(["unloaded.service"], (*SHOW_PROPERTIES, "Result")))["unloaded.service"])
    stand_in, real = await both.each(again)
    assert real["ActiveState"] == "active"
    assert stand_in == real


# -- systemctl cat -----------------------------------------------------------------

DROPPED = {
    "dropped.service": unit_file("/usr/bin/python3 -m sglang.launch_server --port 30000",
                                 service="Environment=CUDA_VISIBLE_DEVICES=0,1"),
    "dropped.service.d/20-port.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/python3 -m sglang.launch_server "
                                      "--port 30001 --disaggregation-mode decode\n",
    "dropped.service.d/10-gpus.conf": "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=4,5,6,7\n",
    "dropped.service.d/README": "not a drop-in: systemd reads *.conf only\n",
    "plain.service": unit_file(SLEEP),
}
"""A unit whose drop-ins change its GPUs and its port (in another order than written), and one without."""


async def test_cat_gives_each_unit_file_then_its_drop_ins_as_the_drift_check_reads_them(both):
    await both.scene("dropped", lambda side: side.install(DROPPED))

    async def cat(side: Side) -> tuple:
        result = await side.run(side.commands.cat(["dropped.service", "plain.service", "missing.service"]))
        files = {unit: [(path.removeprefix(f"{side.unit_dir}/"), text) for path, text in found]
                 for unit, found in parse_cat(result.stdout).items()}
        installed = {unit: parse_installed(found) for unit, found in parse_cat(result.stdout).items()}
        return result.exit_status, result.stderr, files, installed
    stand_in, real = await both.each(cat)
    status, stderr, files, installed = real
    assert (status, stderr) == (1, "No files found for missing.service.\n")
    assert [path for path, _ in files["dropped.service"]] == [
        "dropped.service", "dropped.service.d/10-gpus.conf", "dropped.service.d/20-port.conf"]
    assert installed["dropped.service"].environment == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert stand_in == real
