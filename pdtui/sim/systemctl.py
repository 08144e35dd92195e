"""``python -m pdtui.sim.systemctl [--root ROOT] VERB [UNIT...]``: systemctl for a sandbox.

It speaks like the real one where pdtui reads it: the same exit codes
(``is-active`` 0/3, an unknown unit 3 too; 5 for an unknown unit on start/stop), the same error
wording, ``show -p`` as KEY=VALUE lines.  ``start`` spawns a detached
supervisor (``pdtui.sim.supervisor``) and returns once the unit is active, as
for Type=simple; starting an active unit changes nothing.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from pdtui.sim.procs import ident, terminate, wait_gone
from pdtui.sim.unit_store import DEFAULT_MEMLOCK, UnitFile, UnitState, UnitStore, take_start, unit_name

ROOT_ENV = "PDTUI_SIM_ROOT"
START_TIMEOUT = 30.0
RUNNING_STATES = ("active", "activating", "deactivating", "reloading")
SHOW_ORDER = ("Id", "Description", "LoadState", "ActiveState", "SubState", "Result", "MainPID", "ExecMainPID",
              "ExecMainCode", "ExecMainStatus", "NRestarts", "InvocationID", "ActiveEnterTimestamp", "UnitFileState",
              "FragmentPath", "LimitMEMLOCK", "User")


class Usage(Exception):
    """Bad command line: one line for stderr, exit 1 like systemctl."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:   # type: ignore[override]
        raise Usage(message)


def package_env() -> dict[str, str]:
    """The environment for a sim process: this one, with pdtui importable whatever the cwd."""
    top = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    parts = [p for p in path.split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([top, *[p for p in parts if p != top]])}


def effective_state(state: UnitState) -> UnitState:
    """The state as it really is: a run whose supervisor vanished (killed, crashed) has failed."""
    if state.active in RUNNING_STATES and not state.running():
        return state.replaced(active="failed", sub="failed", main_pid=0, result="signal")
    return state


JOB_FAILED = {"exit-code": "the control process exited with error code",
              "signal": "a fatal signal was delivered to the control process",
              "core-dump": "a fatal signal was delivered causing the control process to dump core",
              "timeout": "a timeout was exceeded",
              "start-limit-hit": "start of the service was attempted too often",
              "resources": "of unavailable resources or another system error"}
"""Why systemctl says a start job failed, by the unit's Result."""


def start_unit(store: UnitStore, unit: UnitFile, *, restart: bool = False) -> list[tuple[UnitFile, str]]:
    """Start ``unit`` unless it runs; return once it is active (or has already failed). See :func:`start_units`."""
    return start_units(store, [unit], restart=restart)


def start_units(store: UnitStore, units: list[UnitFile], *, restart: bool = False) -> list[tuple[UnitFile, str]]:
    """Start every unit that does not run, side by side as systemd runs start jobs; return once all are up.

    Returns the units whose start the start limit refused, each with the Result it is left with. ``restart``:
    the start of a restart, whose stop did not unload the unit (see below).
    """
    units = list({unit.name: unit for unit in units}.values())   # a unit named twice is started once
    refused = []
    with ExitStack() as locks:
        for unit in sorted(units, key=lambda u: u.name):   # one order for every caller: no deadlock
            locks.enter_context(store.lock(unit.name))
        starting = []
        for unit in units:
            state = store.read_state(unit.name)
            if state.running() and state.active in ("active", "activating", "reloading"):
                continue
            supervisor = state.supervisor_proc()
            if supervisor is not None:
                wait_gone(supervisor, unit.stop_timeout + 5)
            state = effective_state(store.read_state(unit.name))
            if state.active == "inactive" and not restart and not store.is_enabled(unit.name):
                state.start_limit = None    # systemd unloads an inactive unit nothing refers to, and its start limit
            if not take_start(state, unit):
                refused.append((unit, _refuse(store, unit, state)))
                continue
            # A manual start counts its NRestarts afresh; written before the supervisor spawns, which reads it.
            store.write_state(unit.name, state.replaced(n_restarts=0))
            starting.append(_spawn_supervisor(store, unit))
        _wait_up(starting)
    # a start job that failed before any process (an EnvironmentFile= missing): systemctl start says so
    started = {unit.name for unit in units} - {unit.name for unit, _ in refused}
    failed = [(unit, "resources") for unit in units if unit.name in started
              and (state := store.read_state(unit.name)).active == "failed" and state.result == "resources"]
    return refused + failed


def _refuse(store: UnitStore, unit: UnitFile, state: UnitState) -> str:
    """The start limit refused a start: the unit fails as systemd fails it (a Result it had stays); that Result."""
    from pdtui.sim.journal import Journal, pid1_entry
    from pdtui.sim.supervisor import refused_lines

    result = state.result if state.result != "success" else "start-limit-hit"
    store.write_state(unit.name, state.replaced(active="failed", sub="failed", result=result))
    journal = Journal(store.root)
    try:
        journal.append([pid1_entry(unit.name, state.invocation, message, priority)
                        for message, priority in refused_lines(unit, result)])
    finally:
        journal.close()
    return result


def job_failed(name: str, result: str) -> str:
    """What ``systemctl start`` says on stderr when the start job of ``name`` failed, leaving it with ``result``."""
    why = JOB_FAILED.get(result)
    lines = [f"Job for {name} failed because {why}." if why else f"Job for {name} failed.",
             f'See "systemctl status {name}" and "journalctl -xeu {name}" for details.']
    if result == "start-limit-hit":
        lines += [f'To force a start use "systemctl reset-failed {name}"', f'followed by "systemctl start {name}" again.']
    return "\n".join(lines)


def _wait_up(ready_fds: list[int]) -> None:
    """Until every supervisor wrote its byte (up) or closed its pipe (died first), or START_TIMEOUT."""
    deadline = time.monotonic() + START_TIMEOUT
    waiting = set(ready_fds)
    try:
        while waiting and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(waiting), [], [], left)
            waiting.difference_update(ready)
    finally:
        for fd in ready_fds:
            os.close(fd)


def _spawn_supervisor(store: UnitStore, unit: UnitFile) -> int:
    """Start the unit's supervisor and record it; the read end of the pipe it tells on once the unit is up.

    The record is written here, under the unit's lock, so a :meth:`Sandbox.stop_all`
    waiting for the lock finds it (a systemctl ended between spawn and record
    leaves a supervisor that stop_all finds by its command line). As PID 1
    does, the invocation ID is assigned by whoever starts the job, so the record
    carries it from the first moment.
    """
    # Imported here: most runs (show, is-active) start nothing.
    import subprocess
    import uuid

    from pdtui.sim.python import sim_python

    invocation = uuid.uuid4().hex
    ready_r, ready_w = os.pipe()
    log = open(store.state_dir / f"{unit.name}.supervisor.log", "ab")
    try:
        proc = subprocess.Popen(
            [*sim_python("pdtui.sim.supervisor"), "--root", str(store.root),
             "--notify-fd", str(ready_w), "--invocation", invocation, unit.name],
            pass_fds=(ready_w,), start_new_session=True, env=package_env(),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
        )
        previous = store.read_state(unit.name)
        store.write_state(unit.name, UnitState(active="activating", sub="start", invocation=invocation,
                                               n_restarts=previous.n_restarts, supervisor=ident(proc.pid),
                                               active_enter_us=previous.active_enter_us,
                                               start_limit=previous.start_limit))
    except BaseException:
        os.close(ready_r)
        raise
    finally:
        os.close(ready_w)
        log.close()
    return ready_r


def stop_unit(store: UnitStore, unit: UnitFile) -> None:
    """Stop ``unit`` and wait until its processes are gone."""
    with store.lock(unit.name):
        state = store.read_state(unit.name)
        supervisor = state.supervisor_proc()
        if supervisor is not None and supervisor.alive():
            terminate(supervisor, unit.stop_timeout + 5)
        child = state.child_proc()
        if child is not None and child.alive():   # its supervisor was killed: nobody else will
            terminate(child, unit.stop_timeout, group=True)


def show_properties(store: UnitStore, name: str) -> dict[str, str]:
    """The properties ``systemctl show`` reports for ``name`` (LoadState=not-found if unknown)."""
    name = unit_name(name)
    unit = store.load(name)
    state = effective_state(store.read_state(name))
    return {
        "Id": name,
        "Description": unit.description if unit else "",
        "LoadState": "loaded" if unit else "not-found",
        "ActiveState": state.active,
        "SubState": state.sub,
        "Result": state.result,
        "MainPID": str(state.main_pid if state.active in RUNNING_STATES else 0),
        "ExecMainPID": str(state.child[0] if state.child else 0),
        "ExecMainCode": str(state.exec_main_code),
        "ExecMainStatus": str(state.exec_main_status),
        "NRestarts": str(state.n_restarts),
        "InvocationID": state.invocation,
        "ActiveEnterTimestamp": _timestamp(state.active_enter_us),
        "UnitFileState": ("enabled" if store.is_enabled(name) else "disabled") if unit else "",
        "FragmentPath": str(store.unit_path(name)) if unit else "",
        "LimitMEMLOCK": unit.memlock if unit else DEFAULT_MEMLOCK,
        "User": unit.user if unit else "",
    }


def _timestamp(us: int) -> str:
    """As systemctl prints a timestamp, in UTC (the sandbox's zone): ``Tue 2026-12-01 15:05:21 UTC``."""
    return time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(us / 1e6)) if us else ""


def _status_text(store: UnitStore, unit: UnitFile) -> str:
    props = show_properties(store, unit.name)
    state = effective_state(store.read_state(unit.name))
    active = f"{state.active} ({state.sub})" if state.active != "failed" else f"failed (Result: {state.result})"
    if state.since_us:
        stamp = time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(state.since_us / 1e6))
        ago = int(time.time() - state.since_us / 1e6)
        active += f" since {stamp}; {ago}s ago"
    bullet = "×" if state.active == "failed" else "●"
    lines = [
        f"{bullet} {unit.name} - {unit.description or unit.name}",
        f"     Loaded: loaded ({props['FragmentPath']}; {props['UnitFileState']}; preset: disabled)",
        f"     Active: {active}",
    ]
    if state.invocation:
        lines.append(f" Invocation: {state.invocation}")
    if props["MainPID"] != "0":
        lines.append(f"   Main PID: {props['MainPID']} ({Path(unit.argv[0]).name})")
    return "\n".join(lines)


class Systemctl:
    """One invocation: a verb applied to units, printing what systemctl prints."""

    def __init__(self, store: UnitStore, args: argparse.Namespace) -> None:
        self.store = store
        self.args = args
        self.rc = 0

    def fail(self, message: str, rc: int) -> None:
        print(message, file=sys.stderr)
        self.rc = rc

    def each(self, verb: str, missing: str, missing_rc: int, action: Callable[[UnitFile], None]) -> int:
        for unit in self.loadable(verb, missing, missing_rc):
            action(unit)
        return self.rc

    def loadable(self, verb: str, missing: str, missing_rc: int) -> list[UnitFile]:
        """The named units that can be acted on; an error line (and the exit code) for each other one."""
        units = []
        for name in self.args.units:
            unit = self.store.load(name)
            if unit is None:
                self.fail(missing.format(verb=verb, unit=unit_name(name)), missing_rc)
            elif not unit.argv:
                self.fail(f"Failed to {verb} {unit.name}: Unit {unit.name} has a bad unit file setting.", 1)
            else:
                units.append(unit)
        return units

    def start(self) -> int:
        self.refused(start_units(self.store, self.loadable("start", "Failed to {verb} {unit}: Unit {unit} not found.", 5)))
        return self.rc

    def refused(self, units: list[tuple[UnitFile, str]]) -> None:
        """Say so of each start the start limit refused, as systemctl says a start job failed (exit 1)."""
        for unit, result in units:
            self.fail(job_failed(unit.name, result), 1)

    def stop(self) -> int:
        return self.each("stop", "Failed to {verb} {unit}: Unit {unit} not loaded.", 5,
                         lambda u: stop_unit(self.store, u))

    def restart(self) -> int:
        def restart(unit: UnitFile) -> None:
            stop_unit(self.store, unit)
            self.refused(start_unit(self.store, unit, restart=True))
        return self.each("restart", "Failed to {verb} {unit}: Unit {unit} not found.", 5, restart)

    def enable(self) -> int:
        return self._set_enabled(True)

    def disable(self) -> int:
        return self._set_enabled(False)

    def _set_enabled(self, enabled: bool) -> int:
        verb = "enable" if enabled else "disable"
        wants = "/etc/systemd/system/multi-user.target.wants"

        def apply(unit: UnitFile) -> None:
            if self.store.set_enabled(unit.name, enabled) and not self.args.quiet:
                if enabled:
                    print(f"Created symlink {wants}/{unit.name} → {self.store.unit_path(unit.name)}.", file=sys.stderr)
                else:
                    print(f'Removed "{wants}/{unit.name}".', file=sys.stderr)
            if self.args.now and enabled:
                self.refused(start_unit(self.store, unit))
            elif self.args.now:
                stop_unit(self.store, unit)
        return self.each(verb, "Failed to {verb} unit: Unit file {unit} does not exist.", 1, apply)

    def is_active(self) -> int:
        """Each unit's ActiveState; exit 0 when one is active, else 3, an unknown unit too (systemd 252)."""
        any_active = False
        for name in self.args.units:
            known = self.store.load(name) is not None
            state = effective_state(self.store.read_state(name)).active if known else "inactive"
            any_active |= state in ("active", "reloading")
            if not self.args.quiet:
                print(state)
        return 0 if any_active else 3

    def is_enabled(self) -> int:
        any_enabled = False
        for name in self.args.units:
            if self.store.load(name) is None:
                self.fail(f"Failed to get unit file state for {unit_name(name)}: No such file or directory", 1)
                continue
            enabled = self.store.is_enabled(name)
            any_enabled |= enabled
            if not self.args.quiet:
                print("enabled" if enabled else "disabled")
        return 0 if any_enabled and self.rc == 0 else 1

    def show(self) -> int:
        wanted = [p for group in self.args.property for p in group.split(",") if p]
        blocks = []
        for name in self.args.units:
            props = show_properties(self.store, name)
            keys = [k for k in wanted if k in props] if wanted else list(SHOW_ORDER)
            blocks.append("\n".join(props[k] if self.args.value else f"{k}={props[k]}" for k in keys))
        print("\n\n".join(blocks))
        return 0

    def status(self) -> int:
        texts, rc = [], 0
        for name in self.args.units:
            unit = self.store.load(name)
            if unit is None:
                self.fail(f"Unit {unit_name(name)} could not be found.", 4)
                rc = 4
                continue
            texts.append(_status_text(self.store, unit))
            if effective_state(self.store.read_state(name)).active not in ("active", "reloading"):
                rc = rc or 3
        if texts:
            print("\n\n".join(texts))
        return rc

    def reset_failed(self) -> int:
        for name in self.args.units or self.store.names():
            state = effective_state(self.store.read_state(name))
            if state.active == "failed" or state.start_limit:     # systemd's reset-failed clears the start limit too
                if state.active == "failed":
                    state.active, state.sub, state.result, state.n_restarts = "inactive", "dead", "success", 0
                state.start_limit = None
                self.store.write_state(name, state)
        return 0

    def daemon_reload(self) -> int:
        return 0

    def cat(self) -> int:
        """Each unit's file, then its drop-ins (``NAME.service.d/*.conf``, by name), each under a ``# PATH`` line
        as systemctl prints them; a missing unit said on stderr."""
        texts, rc = [], 0
        for name in self.args.units:
            path = self.store.unit_path(name)
            try:
                texts.append(f"# {path}\n{path.read_text()}")
            except (FileNotFoundError, NotADirectoryError):
                self.fail(f"No files found for {unit_name(name)}.", 1)
                rc = 1
                continue
            texts += [f"# {conf}\n{conf.read_text()}" for conf in sorted(path.with_name(f"{path.name}.d").glob("*.conf"))]
        if texts:
            sys.stdout.write("\n".join(texts))
        return rc

    def list_units(self) -> int:
        """The units in memory, as systemd 252 prints them: those active or failed, every one with ``--all``.

        A unit is in memory once it was enabled or started; a unit file nothing
        has touched is not (``list-unit-files`` shows it). ``--plain`` drops the
        glyph column (``●`` before a failed or missing unit), ``--no-legend``
        the header and the footer.
        """
        rows = []
        for name in self._listed(self._loaded_names()):
            props = show_properties(self.store, name)
            if not self.args.all and props["ActiveState"] == "inactive":
                continue
            bad = props["ActiveState"] == "failed" or props["LoadState"] != "loaded"
            rows.append(["\u25cf" if bad else " ", name, props["LoadState"], props["ActiveState"], props["SubState"],
                         props["Description"] or name])
        header = ["", "UNIT", "LOAD", "ACTIVE", "SUB", "DESCRIPTION"]
        if self.args.plain:
            rows, header = [row[1:] for row in rows], header[1:]
        more = "" if self.args.all else " Pass --all to see loaded but inactive units, too."
        footer = ["", "LOAD   = Reflects whether the unit definition was properly loaded.",
                  "ACTIVE = The high-level unit activation state, i.e. generalization of SUB.",
                  "SUB    = The low-level unit activation state, values depend on unit type.",
                  f"{len(rows)} loaded units listed.{more}",
                  "To show all installed unit files use 'systemctl list-unit-files'."]
        self._table(header, rows, footer)
        return 0

    def list_unit_files(self) -> int:
        """Every unit file with its enablement, as systemd 252 prints them (the vendor preset is Debian's)."""
        rows = [[name, "enabled" if self.store.is_enabled(name) else "disabled", "enabled"]
                for name in self._listed(self.store.names())]
        self._table(["UNIT FILE", "STATE", "VENDOR PRESET"], rows, ["", f"{len(rows)} unit files listed."])
        return 0

    def _loaded_names(self) -> list[str]:
        """Units systemd would hold in memory: enabled or started ones (a removed one only while it still runs)."""
        names = set(self.store.names())
        loaded = {n for n in names if self.store.is_enabled(n)}
        for name in self.store.started_names():
            if name in names or effective_state(self.store.read_state(name)).active != "inactive":
                loaded.add(name)
        return sorted(loaded)

    def _listed(self, names: list[str]) -> list[str]:
        """``names`` of the ``--type`` asked for (every type without one) matching the patterns given, if any."""
        import fnmatch
        types = {t for group in self.args.type for t in group.split(",") if t}
        return [name for name in names
                if (not types or name.rpartition(".")[2] in types)
                and (not self.args.units or any(fnmatch.fnmatchcase(name, p) for p in self.args.units))]

    def _table(self, header: list[str], rows: list[list[str]], footer: list[str]) -> None:
        """Columns padded to their widest cell and one space apart, the last one unpadded (no trailing blanks)."""
        shown = rows if self.args.no_legend else [header, *rows]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in shown:
            cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
            print(" ".join([*cells, row[-1]]).rstrip())
        if not self.args.no_legend:
            print("\n".join(footer))


VERBS: dict[str, Callable[[Systemctl], int]] = {
    "start": Systemctl.start, "stop": Systemctl.stop, "restart": Systemctl.restart,
    "enable": Systemctl.enable, "disable": Systemctl.disable, "is-active": Systemctl.is_active,
    "is-enabled": Systemctl.is_enabled, "show": Systemctl.show, "status": Systemctl.status,
    "reset-failed": Systemctl.reset_failed, "daemon-reload": Systemctl.daemon_reload,
    "list-units": Systemctl.list_units, "list-unit-files": Systemctl.list_unit_files, "cat": Systemctl.cat,
}
NEEDS_UNIT = {"start", "stop", "restart", "enable", "disable", "is-active", "is-enabled", "show", "status", "cat"}
VERSION = "systemd 252 (252.39-1~deb12u2)\n+PAM +AUDIT +SELINUX +APPARMOR +IMA +SMACK +SECCOMP +GCRYPT -GNUTLS +OPENSSL"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(prog="systemctl", add_help=False)
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("-q", "--quiet", action="store_true")
    parser.add_argument("--no-pager", action="store_true")
    parser.add_argument("--no-block", action="store_true")
    parser.add_argument("--now", action="store_true")
    parser.add_argument("--value", action="store_true")
    parser.add_argument("-a", "--all", action="store_true")
    parser.add_argument("-p", "--property", action="append", default=[])
    parser.add_argument("-t", "--type", action="append", default=[])
    parser.add_argument("--no-legend", action="store_true")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("-l", "--full", action="store_true")
    parser.add_argument("verb")
    parser.add_argument("units", nargs="*")
    return parser.parse_intermixed_args(argv)


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if "--version" in words:
        print(VERSION)
        return 0
    try:
        args = _parse(words)
    except Usage as exc:
        print(f"systemctl: {exc}", file=sys.stderr)
        return 1
    root = args.root or (Path(os.environ[ROOT_ENV]) if os.environ.get(ROOT_ENV) else None)
    if root is None:
        print(f"systemctl: no sandbox: pass --root ROOT or set {ROOT_ENV}", file=sys.stderr)
        return 1
    action = VERBS.get(args.verb)
    if action is None:
        print(f"Unknown command verb '{args.verb}'.", file=sys.stderr)
        return 1
    if args.verb in NEEDS_UNIT and not args.units:
        print("Too few arguments.", file=sys.stderr)
        return 1
    try:
        return action(Systemctl(UnitStore(root), args))
    except KeyboardInterrupt:      # Ctrl-C: the start job goes on without its waiter, as under systemd
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
