"""Hostile arguments reach the remote command exactly as given: the remote shell interprets nothing."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from pdtui.hosts.ssh import SshHost
from tests.sshd import host_config

SHELL_SOUP = ["'", '"', "\\", "`id`", "$(touch /tmp/pdtui-pwned)", "${HOME}", "$0", "$@", ";", "&&", "|",
              ">", "<", "*", "?", "~", "#", "!", "\n", "\r", "\t", " ", "-n", "--", "%s", "\\0", "\x1b[31m",
              "é", "日本", "\U0001f600", ""]

hostile = st.one_of(
    st.sampled_from(SHELL_SOUP),
    st.lists(st.sampled_from(SHELL_SOUP), max_size=6).map("".join),
    st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=20),
)


def test_hostile_arguments_arrive_unchanged(sshd, ssh_home):
    ssh_home.known_hosts.write_text(sshd.known_hosts_line())
    loop = asyncio.new_event_loop()
    host = SshHost(host_config(sshd.port))

    @settings(max_examples=60, deadline=None)
    @given(st.lists(hostile, min_size=1, max_size=6))
    def arrives_unchanged(args: list[str]) -> None:
        result = loop.run_until_complete(host.run(["printf", "%s\\0", *args]))
        assert result.ok, result.stderr
        assert result.stdout.split("\0")[:-1] == args

    try:
        arrives_unchanged()
    finally:
        loop.run_until_complete(host.close())
        loop.close()
