"""``pdtui units --install`` with ``sudo: true``: a few fixed commands a sudoers line can name (never ``sudo sh``),
every file's content on stdin (never an argv word)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import yaml

from pdtui.commands import units_command as units
from pdtui.config import parse_config
from pdtui.hosts.base import HostError, Result
from tests.unit.test_config import SLURM
from tests.unit.test_unit_files import multi_node


class RecordingHost:
    """Answers every command as a host with nothing installed would; keeps each argv and its stdin."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[tuple[str, ...], bytes | None]] = []

    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        self.calls.append((tuple(argv), input))
        if "cat" in argv:
            return Result(tuple(argv), 1, "", "No files found for x.service.\n")
        return Result(tuple(argv), 0, "systemd 252 (252.39)\n" if "--version" in argv else "", "")

    async def close(self) -> None:
        return None


async def test_install_with_sudo_runs_only_fixed_commands_with_each_file_on_stdin():
    config = multi_node()
    config["hosts"]["d0"]["sudo"] = True
    config["services"]["decode-0"]["launch"] = {"model": "m", "env": {"HF_TOKEN": "hf_sudoSecret9"}}
    deployment = parse_config(yaml.safe_dump(config), "mn.yaml")
    hosts: dict[str, RecordingHost] = {}

    def factory(host_config, **_: object) -> RecordingHost:
        return hosts.setdefault(host_config.name, RecordingHost(host_config.name))

    assert await units.install(deployment, factory, yes=False) == 0
    calls = hosts["d0"].calls
    writes = [argv for argv, _ in calls if argv[2:3] != ("systemctl",)]
    assert writes == [
        ("sudo", "-n", "install", "-d", "-m", "0700", "/etc/pdtui/env"),
        ("sudo", "-n", "install", "-m", "0600", "/dev/stdin", "/etc/pdtui/env/d.service.env"),
        ("sudo", "-n", "install", "-m", "0644", "/dev/stdin", "/etc/systemd/system/.d.service.pdtui-tmp"),
        ("sudo", "-n", "mv", "-f", "/etc/systemd/system/.d.service.pdtui-tmp", "/etc/systemd/system/d.service")]
    assert calls[-1][0] == ("sudo", "-n", "systemctl", "daemon-reload")
    stdin = {argv[-1]: content for argv, content in calls if content is not None}
    assert stdin["/etc/pdtui/env/d.service.env"] == b'HF_TOKEN="hf_sudoSecret9"\n'
    assert b"hf_sudoSecret9" not in stdin["/etc/systemd/system/.d.service.pdtui-tmp"]
    assert not any("sh" in argv or any("hf_sudoSecret9" in word for word in argv) for argv, _ in calls)


class RefusingHost(RecordingHost):
    """A host whose SSH server hangs up with a hostile reason (terminal escapes: a clipboard write, a clear)."""

    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        raise HostError(f"{self.name}: SSH with root@h failed: bye \x1b]52;c;cHduZWQ=\x07\x1b[2J (error 1)")


class AnsweringHost(RecordingHost):
    """A host that answers with hostile text: the installed unit and a failed command's stderr."""

    async def run(self, argv: Sequence[str], *, timeout: float | None = None, read_only: bool = False,
                  input: bytes | None = None) -> Result:
        if "cat" in argv:
            return Result(tuple(argv), 0, "# /etc/systemd/system/d.service\n[Unit]\n# \x1b]0;title\x07\n", "")
        if "install" in argv:
            return Result(tuple(argv), 1, "", "install: \x1b[2Jdenied\n")
        return Result(tuple(argv), 0, "systemd 252\n", "")


@pytest.mark.parametrize("flag", ["diff_them", "install_them"])
def test_what_a_host_says_is_printed_inert(capsys, flag):
    deployment = parse_config(yaml.safe_dump(multi_node()), "mn.yaml")
    assert units.run(deployment, **{flag: True}, yes=True, factory=lambda config, **_: RefusingHost(config.name)) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "bye \u241b]52;c;cHduZWQ=\u2407\u241b[2J" in err
    assert units.run(deployment, **{flag: True}, yes=True, factory=lambda config, **_: AnsweringHost(config.name)) == 1
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out + printed.err and "\x07" not in printed.out + printed.err
    assert ("\u241b]0;title\u2407" in printed.out) if flag == "diff_them" else ("\u241b[2Jdenied" in printed.err)


@pytest.mark.parametrize(("config", "flag"), [(SLURM, "diff_them"), ("name: x\nhosts: {h: {local: true}}\n"
                                                                     "services: {a: {host: h, unit: a, role: other}}\n",
                                                                     None)], ids=["jobs", "no-launch"])
def test_the_configs_file_name_is_printed_inert_when_there_is_no_unit(capsys, config, flag):
    deployment = parse_config(config, "/tmp/x\x1b]0;title\x07.yaml")
    assert units.run(deployment, **({flag: True} if flag else {}), factory=lambda config, **_: RecordingHost("h")) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "x\u241b]0;title\u2407.yaml" in err


def test_the_files_written_are_named_inert(capsys, tmp_path):
    deployment = parse_config(yaml.safe_dump(multi_node()), "mn.yaml")
    assert units.run(deployment, out=str(tmp_path / "o\x1b[2J")) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "o\u241b[2J/" in out


def test_the_suggested_diff_command_quotes_the_configs_file_name(capsys):
    deployment = parse_config(yaml.safe_dump(multi_node()), "/tmp/my pd;touch x.yaml")
    assert units.run(deployment, install_them=True, factory=lambda config, **_: AnsweringHost(config.name)) == 1
    err = capsys.readouterr().err
    assert "(pdtui units '/tmp/my pd;touch x.yaml' --diff shows how)" in err
