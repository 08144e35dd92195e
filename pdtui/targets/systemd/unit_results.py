"""How a unit's run ended, in words: systemd's Result=, ExecMainCode= and ExecMainStatus=, and its own lines.

``exit status 9`` tells a user little: a server killed by the kernel's OOM
killer, one whose ``ExecStart`` could not be run at all (systemd's own exit
status 203/EXEC: the commonest mistake of a hand-written unit, a wrong venv
path) and one that ran out of ``TimeoutStartSec`` all read alike. Here each is
named as systemd knows it, and the line systemd wrote about it (``Failed to
locate executable …``) is quoted where it wrote one.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence

# ExecMainCode=: the siginfo code of the main process's end (CLD_*), 0 while it runs or never ran.
EXITED, KILLED, DUMPED = "1", "2", "3"

# systemd's own exit statuses (exit-status.h): its executor exits with one when it cannot set up or run ExecStart.
# The common ones say what to look at.
SYSTEMD_EXITS: Mapping[int, tuple[str, str]] = {
    200: ("CHDIR", "its WorkingDirectory= could not be entered"),
    201: ("NICE", ""), 202: ("FDS", ""),
    203: ("EXEC", "systemd could not run its ExecStart: a wrong path, often a venv's python"),
    204: ("MEMORY", ""), 205: ("LIMITS", "a Limit*= could not be set"), 206: ("OOM_ADJUST", ""),
    207: ("SIGNAL_MASK", ""), 208: ("STDIN", ""), 209: ("STDOUT", "its standard output could not be set up"),
    210: ("CHROOT", ""), 211: ("IOPRIO", ""), 212: ("TIMERSLACK", ""), 213: ("SECUREBITS", ""),
    214: ("SETSCHEDULER", ""), 215: ("CPUAFFINITY", "its CPUAffinity= could not be set"),
    216: ("GROUP", "its Group= does not exist"), 217: ("USER", "its User= does not exist"),
    218: ("CAPABILITIES", ""), 219: ("CGROUP", ""), 220: ("SETSID", ""), 221: ("CONFIRM", ""),
    222: ("STDERR", ""), 224: ("PAM", ""), 225: ("NETWORK", ""), 226: ("NAMESPACE", ""),
    227: ("NO_NEW_PRIVILEGES", ""), 228: ("SECCOMP", ""), 229: ("SELINUX_CONTEXT", ""), 230: ("PERSONALITY", ""),
    231: ("APPARMOR_PROFILE", ""), 232: ("ADDRESS_FAMILIES", ""), 233: ("RUNTIME_DIRECTORY", ""), 235: ("CHOWN", ""),
    236: ("SMACK_PROCESS_LABEL", ""), 237: ("KEYRING", ""), 238: ("STATE_DIRECTORY", ""),
    239: ("CACHE_DIRECTORY", ""), 240: ("LOGS_DIRECTORY", ""), 241: ("CONFIGURATION_DIRECTORY", ""),
    242: ("NUMA_POLICY", "its NUMAPolicy= or NUMAMask= could not be set"),
    243: ("CREDENTIALS", ""), 245: ("BPF", ""),
}

# What a Result= other than exit-code or signal means: systemd ended the run itself, or refused it.
RESULTS: Mapping[str, str] = {
    "oom-kill": "killed by the kernel's OOM killer, out of host memory",
    "timeout": "systemd's own timeout ran out, TimeoutStartSec= or TimeoutStopSec=",
    "start-limit-hit": "started too often: systemd's start limit, StartLimitBurst= in StartLimitIntervalSec=, "
                       "refuses further starts until reset-failed",
    "watchdog": "its watchdog timed out, WatchdogSec=",
    "resources": "systemd could not set up its resources",
    "core-dump": "",     # said from ExecMainCode, with its signal
    "exec-condition": "its ExecCondition= said no",
}

# systemd's lines that say why a run ended, where its state alone cannot (after "<unit>: ").
_TELLING = re.compile(r"Failed to locate executable |Failed at step \w+ spawning |Failed to execute |"
                      r"killed by the OOM killer|Start request repeated too quickly|Changing to the requested working "
                      r"directory failed|Failed to determine (user|group) credentials")


def ended(props: Mapping[str, str]) -> str:
    """How the unit's last run ended (``exit status 203/EXEC: systemd could not run its ExecStart…``,
    ``killed by signal 9/KILL``, ``killed by the kernel's OOM killer…``), from its ``systemctl show``: words
    without parentheses, as a reason puts them in its own."""
    result, code, status = props.get("Result", ""), props.get("ExecMainCode", ""), props.get("ExecMainStatus", "?")
    if result in RESULTS and RESULTS[result]:
        return RESULTS[result]
    if code in (KILLED, DUMPED):
        how = "dumped core on" if code == DUMPED else "killed by"
        return f"{how} signal {_signal(status)}"
    number = int(status) if status.isdigit() else None
    if number is not None and number in SYSTEMD_EXITS:
        name, meaning = SYSTEMD_EXITS[number]
        return f"exit status {number}/{name}: " + (meaning or "systemd's own, set before its ExecStart ran")
    return f"exit status {status}"


def over(unit: str | None, props: Mapping[str, str], invocation: str | None) -> str | None:
    """Why the unit's invocation ``invocation`` is over, if it is: it failed, stopped, ended and waits to restart,
    or restarted.

    A run whose main process died while other processes of its control group live on reads ``deactivating`` for a
    moment (``stop-sigterm``: systemd ends them), its Result= already set: that run ended, nobody stopped it.
    """
    active = props.get("ActiveState", "")
    if active == "failed":
        return f"unit {unit} failed ({ended(props)})"
    if active in ("inactive", "deactivating"):
        if props.get("Result", "") not in ("success", ""):
            return f"unit {unit} ended ({ended(props)})"
        return f"unit {unit} stopped ({active})"
    if restarting(props):
        return f"unit {unit} ended ({ended(props)}); systemd restarts it (auto-restart, " \
               f"NRestarts={props.get('NRestarts', '?')})"
    now = props.get("InvocationID") or None
    if invocation and now and now != invocation:
        return f"unit {unit} restarted (NRestarts={props.get('NRestarts', '?')})"
    return None


def restarting(props: Mapping[str, str]) -> bool:
    """``activating``/``auto-restart``: the unit's process is gone and ``Restart=`` waits its RestartSec."""
    return props.get("SubState") == "auto-restart"


def by_executor(props: Mapping[str, str]) -> bool:
    """Whether systemd's executor ended the run before its ExecStart ran (one of systemd's own exit statuses): it
    then says why in a line of its own (``Failed to locate executable …``)."""
    status = props.get("ExecMainStatus", "")
    return props.get("ExecMainCode") == EXITED and status.isdigit() and int(status) in SYSTEMD_EXITS


def _signal(status: str) -> str:
    try:
        return f"{status}/{signal.Signals(int(status)).name.removeprefix('SIG')}"
    except ValueError:
        return status


def telling(lines: Sequence[str], unit: str) -> str | None:
    """systemd's first line on this run that says why it ended (a spawn that failed, the OOM killer, the start
    limit), without its ``<unit>: `` prefix; None when it wrote none."""
    prefix = f"{unit}: "
    for line in lines:
        if _TELLING.search(line):
            return line.removeprefix(prefix)
    return None
