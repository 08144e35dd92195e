import json
import sys
import unicodedata

import pytest

from pdtui.support.text import MAX_LINE_CHARS, inert, json_inert, make_visible


def test_colour_codes_are_dropped():
    assert inert("\x1b[2m2026\x1b[0m \x1b[32m INFO\x1b[0m ready") == "2026  INFO ready"


def test_other_escapes_stay_visible_and_inert():
    shown = inert("a\x1b]52;c;aGk=\x07b\x1b]0;title\x07c\x1b[2Jd")
    assert "\x1b" not in shown and "\x07" not in shown
    assert shown == "a␛]52;c;aGk=␇b␛]0;title␇c␛[2Jd"


def test_nul_c1_and_del_become_placeholders():
    assert inert("x\x00y\x9bz\x7f") == "x␀y\\x9bz␡"


def test_a_newline_cannot_move_the_cursor():
    assert inert("one\ntwo\r\nthree") == "one␊two␊three"


def test_a_line_redrawn_by_carriage_returns_reads_as_a_terminal_leaves_it():
    bar = ("\rMulti-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]"
           "\rMulti-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 1296.14it/s]\r")
    assert inert(bar) == "Multi-thread loading shards: 100% Completed | 1/1 [00:00<00:00, 1296.14it/s]"
    assert inert("downloading 100%\rdone") == "doneloading 100%"      # a shorter state leaves the rest standing
    assert inert("50%\r\x1b]0;title\x07") == "␛]0;title␇"             # and stays inert


def test_a_saved_line_keeps_every_state_of_a_redrawn_line():
    assert make_visible("0%\r100%") == "0%␍100%"


def test_a_redrawn_line_is_capped_after_it_is_redrawn():
    states = "".join(f"\rstep {i:05d} " + "x" * 100 for i in range(100))
    assert inert(states) == "step 00099 " + "x" * 100


def test_tabs_become_spaces():
    assert inert("a\tb") == "a       b"


def test_absurd_lines_are_cut_saying_how_much():
    shown = inert("x" * (MAX_LINE_CHARS + 500))
    assert shown.startswith("x" * MAX_LINE_CHARS) and shown.endswith("… (500 more)")


def test_markup_is_left_as_text():
    assert inert("[bold red]boom[/] [link=file:///etc/passwd]x[/link]") == \
        "[bold red]boom[/] [link=file:///etc/passwd]x[/link]"


INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def invisible_characters() -> list[str]:
    """Every control, format character, surrogate and line or paragraph separator Python's Unicode knows, but the tab."""
    return [chr(code) for code in range(sys.maxunicode + 1)
            if code != 9 and unicodedata.category(chr(code)) in INVISIBLE]


@pytest.mark.parametrize("char, shown", [
    ("\u061c", "\\u061c"), ("\u200b", "\\u200b"), ("\u200d", "\\u200d"), ("\u2060", "\\u2060"),
    ("\u2064", "\\u2064"), ("\ufeff", "\\ufeff"), ("\u202e", "\\u202e"), ("\u2067", "\\u2067"),
    ("\u00ad", "\\u00ad"), ("\U000e0041", "\\U000e0041"), ("\u2028", "\\u2028"), ("\udcff", "\\udcff"),
])
def test_format_characters_separators_and_lone_surrogates_are_shown_by_their_code(char, shown):
    assert inert(f"a{char}b") == f"a{shown}b"


def test_no_invisible_character_survives():
    chars = invisible_characters()
    shown = inert("".join(chars), limit=len(chars))
    assert not [ch for ch in shown if unicodedata.category(ch) in INVISIBLE]


def test_json_keeps_its_data_and_escapes_what_json_leaves_raw():
    paired = [ch for ch in invisible_characters() if unicodedata.category(ch) != "Cs"]   # a high and a low
    data = {"line": "x\x7f\x9b\u061c\u2028\U000e0001\udcff\x1b" + "".join(paired)}    # surrogate would pair
    text = json_inert(json.dumps(data, ensure_ascii=False))
    assert json.loads(text) == data
    assert not [ch for ch in text if unicodedata.category(ch) in INVISIBLE]


def test_printable_text_is_returned_as_it_is():
    line = "模型 ready ✓ — 12 ms"
    assert inert(line) is line
