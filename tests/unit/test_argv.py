"""A command line's flags, read one at a time or all at once, alike."""

import pytest

from pdtui.support.argv import flag_value, flag_values

LINES = [
    ["python3", "-m", "sglang.launch_server", "--model-path", "a/b", "--tp", "8", "--page-size=64",
     "--disaggregation-mode", "prefill", "--tp", "4"],
    ["sglang", "--enable-dp-attention", "--dp-size", "2", "--trust-remote-code"],
    ["x", "--kv-cache-dtype=", "--port"],
    ["x", "--revision", "--port", "30000"],
]


@pytest.mark.parametrize("words", LINES)
def test_all_flags_at_once_read_as_each_flag_alone_does(words):
    names = {word.partition("=")[0] for word in words if word.startswith("--")} | {"--absent"}
    values = flag_values(words)
    assert {name: values.get(name) for name in names} == {name: flag_value(words, name) for name in names}


def test_the_last_value_given_wins():
    words = LINES[0]
    assert flag_values(words)["--tp"] == "4" and flag_values(words)["--page-size"] == "64"
