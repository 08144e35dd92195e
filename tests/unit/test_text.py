from pdtui.support.text import MAX_LINE_CHARS, inert


def test_colour_codes_are_dropped():
    assert inert("\x1b[2m2026\x1b[0m \x1b[32m INFO\x1b[0m ready") == "2026  INFO ready"


def test_other_escapes_stay_visible_and_inert():
    shown = inert("a\x1b]52;c;aGk=\x07b\x1b]0;title\x07c\x1b[2Jd")
    assert "\x1b" not in shown and "\x07" not in shown
    assert shown == "a␛]52;c;aGk=␇b␛]0;title␇c␛[2Jd"


def test_nul_c1_and_del_become_placeholders():
    assert inert("x\x00y\x9bz\x7f") == "x␀y\\x9bz␡"


def test_newline_and_carriage_return_cannot_move_the_cursor():
    assert inert("one\rtwo\nthree") == "one␍two␊three"


def test_tabs_become_spaces():
    assert inert("a\tb") == "a       b"


def test_absurd_lines_are_cut_saying_how_much():
    shown = inert("x" * (MAX_LINE_CHARS + 500))
    assert shown.startswith("x" * MAX_LINE_CHARS) and shown.endswith("… (500 more)")


def test_markup_is_left_as_text():
    assert inert("[bold red]boom[/] [link=file:///etc/passwd]x[/link]") == \
        "[bold red]boom[/] [link=file:///etc/passwd]x[/link]"
