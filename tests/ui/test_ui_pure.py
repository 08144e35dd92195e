"""The UI's pure helpers: inert text, formatting, per-service state, merge order, OSC 9, themes."""

from __future__ import annotations

import dataclasses
import gc
import re
from dataclasses import fields
from pathlib import Path

import pytest
from textual.theme import Theme

from pdtui.config import ConfigError
from pdtui.config.fields import format_elapsed
from pdtui.engine.events import JobStatus, LineKind, LogRecord, StateChanged
from pdtui.engine.states import ServiceState as S
from pdtui.gpus.inventory import GpuInfo
from pdtui.sim.scripted import PREFILL, WIDE_DECODE
from pdtui.support.heap import YOUNG_THRESHOLD, QuietCollector
from pdtui.support.text import MAX_LINE_CHARS, inert
from pdtui.ui import themes
from pdtui.ui.filterbar import compile_filter
from pdtui.ui.format import bandwidth, clock_only, figures_summary, gpu_gauges, placement
from pdtui.ui.logview import Lines, Row
from pdtui.ui.merged import merge_by_time
from pdtui.ui.model import ElapsedClock, ServiceView
from pdtui.ui.nodes import lead, node_labels, node_line, pinned
from pdtui.ui.notify import desktop_notification
from pdtui.ui.themes import KEYS, available_themes, read_theme


def test_inert_replaces_every_control_character_with_a_visible_one() -> None:
    text = inert("a\x1b[2Jb\x00c\x07d\x7fe\x9bf\u202eg")
    assert text == "a␛[2Jb␀c␇d␡e\\x9bf\\u202eg"
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in text)


def test_inert_expands_tabs_and_keeps_ordinary_unicode() -> None:
    assert inert("a\tb ✓ 日本 \ufffd") == "a       b ✓ 日本 \ufffd"


def test_inert_caps_an_absurd_line_and_says_how_much_was_cut() -> None:
    text = inert("x" * (1024 * 1024))
    assert text.startswith("x" * MAX_LINE_CHARS)
    assert text.endswith(f"… ({1024 * 1024 - MAX_LINE_CHARS} more)")


def test_duration_formats_minutes_and_hours() -> None:
    assert [format_elapsed(s) for s in (0, 47, 61.9, 3725)] == ["0:00", "0:47", "1:01", "1:02:05"]


def test_gpu_gauges_shrink_to_fit_the_width() -> None:
    gpus = [GpuInfo(i, memory_used_mib=49152, memory_total_mib=98304) for i in range(4)]
    assert gpu_gauges(gpus, 100).startswith("0 ██▄░░ 48/96G")
    assert gpu_gauges(gpus, 30) == "0:48G  1:48G  2:48G  3:48G"


def _changed(new: S, old: S = S.PENDING, **kw: object) -> StateChanged:
    return StateChanged("prefill", old, new, **kw)  # type: ignore[arg-type]


def test_service_view_counts_from_start_and_shows_time_to_ready() -> None:
    view = ServiceView(PREFILL)
    view.apply(_changed(S.STARTING, elapsed=2.0))
    assert view.badge(now=14.0) == "◔ starting 0:12"
    view.apply(_changed(S.READY, S.WAITING, elapsed=43.0, time_to_ready=41.0))
    assert view.badge(now=99.0) == "✓ READY 0:41"


def test_service_view_pins_the_failure_line_inert_and_forgets_it_on_retry() -> None:
    view = ServiceView(PREFILL)
    view.apply(_changed(S.STARTING, elapsed=1.0))
    view.apply(_changed(S.FAILED, S.STARTING, reason="oom", line="\x1b]0;t\x07CUDA out of memory", elapsed=9.0))
    assert view.pinned == "␛]0;t␇CUDA out of memory"
    assert view.badge(now=60.0) == "✗ FAILED 0:08"
    assert view.retryable
    view.apply(_changed(S.PENDING, S.FAILED, elapsed=61.0))
    assert view.pinned is None and not view.retryable


def test_elapsed_clock_follows_events_and_the_injected_clock() -> None:
    now = [100.0]
    clock = ElapsedClock(lambda: now[0])
    clock.sync(10.0)
    now[0] = 105.0
    assert clock.now() == 15.0
    clock.freeze(12.0)
    now[0] = 200.0
    assert clock.now() == 12.0


def test_elapsed_clock_stays_frozen_while_log_events_keep_coming() -> None:
    now = [100.0]
    clock = ElapsedClock(lambda: now[0])
    clock.freeze(7.0)
    clock.sync(34.0)          # a log batch long after the bring-up ended
    assert clock.now() == 7.0
    clock.resume()            # a retry
    clock.sync(40.0)
    now[0] = 102.0
    assert clock.now() == 42.0


def _row(tag: str, ts: float | None, text: str) -> Row:
    return Row(text, LineKind.NORMAL, ts, tag)


def test_merge_interleaves_by_timestamp_and_keeps_journal_order_for_untimed_lines() -> None:
    prefill = [_row("prefill", 1.0, "p1"), _row("prefill", None, "p1b"), _row("prefill", 3.0, "p3")]
    decode = [_row("decode", 2.0, "d2"), _row("decode", 4.0, "d4")]
    assert [r.text for r in merge_by_time([prefill, decode])] == ["p1", "p1b", "d2", "p3", "d4"]


def test_osc9_is_inert_and_wrapped_for_tmux() -> None:
    plain = desktop_notification("ready\x07\x1b]0;x", in_tmux=False)
    assert plain == "\x1b]9;ready␇␛]0;x\x07"
    wrapped = desktop_notification("ready", in_tmux=True)
    assert wrapped == "\x1bPtmux;\x1b\x1b]9;ready\x07\x1b\\"


def test_themes_ship_dark_and_light_and_a_bad_name_lists_them() -> None:
    assert {"dark", "light"} <= set(available_themes())
    light = read_theme("light")
    assert light.textual_name == "pdtui-light" and light.settings["dark"] is False
    assert light.variables["pd-background"] == "#ffffff"
    with pytest.raises(ValueError, match="available themes: dark, light") as info:
        read_theme("solarised")
    assert "\n" not in str(info.value)


def test_a_theme_file_takes_exactly_the_settings_of_a_textual_theme() -> None:
    assert set(KEYS) == {field.name for field in fields(Theme)} - {"name"}


def test_every_theme_defines_the_same_pd_variables() -> None:
    shipped = [read_theme(name).variables for name in available_themes()]
    assert all({k for k in v if k.startswith("pd-")} == {k for k in shipped[0] if k.startswith("pd-")} for v in shipped)


@pytest.mark.parametrize(("text", "error"), [
    ("primary: #0178d4\n", "2:9: expected a colour such as \"#0178d4\" for 'primary', got nothing (quote it"),
    ("dark: true\nprimry: \"#0178d4\"\n", "3:1: unknown key 'primry' in the top level (did you mean 'primary'?)"),
    ("dark: yes please\n", "2:7: expected true or false for 'dark', got 'yes please'"),
    ("variables:\n  pd-text: [1]\n", "3:12: expected a CSS value such as \"#0178d4\" for variable 'pd-text', got a list"),
    ("primary: [\n", "3:1: YAML syntax error"),
    ("- primary\n", "2:1: expected a mapping of Textual theme settings, got a list"),
])
def test_a_bad_theme_file_is_one_line_naming_the_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      text: str, error: str) -> None:
    (tmp_path / "neon.yaml").write_text(f"# neon\n{text}", encoding="utf-8")
    monkeypatch.setattr(themes, "_theme_dir", lambda: tmp_path)
    with pytest.raises(ConfigError) as info:
        read_theme("neon")
    assert str(info.value).startswith(f"{tmp_path / 'neon.yaml'}:{error}")


def test_quiet_collector_raises_the_young_threshold_freezes_the_screen_and_puts_both_back() -> None:
    before = gc.get_threshold()
    collector = QuietCollector()
    try:
        collector.start()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        collector.settle()
        assert gc.get_freeze_count() > 0
    finally:
        collector.restore()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_log_lines_are_kept_as_plain_columns_and_come_back_as_rows() -> None:
    lines = Lines(tagged=True)
    lines.extend([LogRecord("ready", LineKind.READY, 5.0), LogRecord("no time", LineKind.WARN, None)], ["p", "d"])
    assert [lines.row(i, "ignored") for i in range(2)] == [Row("ready", LineKind.READY, 5.0, "p"),
                                                            Row("no time", LineKind.WARN, None, "d")]
    assert not any(gc.is_tracked(item) for item in [*lines.texts, *lines.tags, *lines.kinds, *lines.stamps])
    lines.drop_first(1)
    assert len(lines) == 1 and lines.row(0, "") == Row("no time", LineKind.WARN, None, "d")


def test_quiet_collector_gives_freed_heap_memory_back_where_the_c_library_can(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    collector = QuietCollector()
    monkeypatch.setattr(collector, "_trim", lambda pad: calls.append(pad) or 1)
    collector.release()
    assert calls == [0]
    monkeypatch.setattr(collector, "_trim", None)
    collector.release()           # no such call (not glibc): nothing happens, nothing fails
    assert calls == [0]


def test_a_prefills_kv_rate_reads_in_two_or_three_figures_with_its_failures() -> None:
    assert [bandwidth(g) for g in (12.4, 1.23, 0.0693, 0.0039)] == ["12 GB/s", "1.2 GB/s", "71 MB/s", "4.0 MB/s"]
    from pdtui.engine.events import ServingFigures
    from pdtui.vocabulary.figures import Figures
    line = figures_summary(ServingFigures("prefill", "metrics", Figures(prompt_tps=58.0, kv_gbps=1.2, kv_failed=0)))
    assert line == "58 prompt tok/s · KV 1.2 GB/s · 0 failed"
    decode = figures_summary(ServingFigures("decode", "metrics", Figures(generation_tps=35.0, kv_failed=3)))
    assert decode == "35 tok/s · 3 KV transfers failed"


@pytest.mark.parametrize(("line", "shown"), [
    ("[2026-12-05 05:10:08 TP0] Load weight begin.", "[05:10:08 TP0] Load weight begin."),
    ("[2026-12-05 05:10:08 DP1 TP1 EP1] Init parallel begin.", "[05:10:08 DP1 TP1 EP1] Init parallel begin."),
    ("[2025-02-17 05:27:24] INFO:     Started server process [1]", "[05:27:24] INFO:     Started server process [1]"),
    ("2026-12-05 05:10:08  INFO smg::server: Starting router", "05:10:08  INFO smg::server: Starting router"),
    ("2026-12-05T05:10:08.123456Z  INFO smg::worker: x", "05:10:08  INFO smg::worker: x"),
    ("(APIServer pid=13145) INFO 12-05 06:39:50 [api_utils.py:347] up", "(APIServer pid=13145) INFO 06:39:50 [api_utils.py:347] up"),
    ("a line quoting 2026-12-05 05:10:08 later on", "a line quoting 2026-12-05 05:10:08 later on"),
    ("2026-12-05 05:10:08x is no stamp", "2026-12-05 05:10:08x is no stamp"),
    ("Traceback (most recent call last):", "Traceback (most recent call last):"),
])
def test_a_narrow_panel_keeps_the_time_a_line_opens_with_and_drops_its_date(line: str, shown: str) -> None:
    assert clock_only(line) == shown


def _rank_views(*states: S) -> list[ServiceView]:
    views = [ServiceView(dataclasses.replace(WIDE_DECODE, name="decode" if r == 0 else f"decode@{r}", rank=r,
                                             host=f"gpu-{r}", server="" if r == 0 else "decode")) for r in range(len(states))]
    for view, state in zip(views, states, strict=True):
        view.state = state
    return views


def test_a_wide_server_is_led_by_a_failed_rank_else_by_the_rank_furthest_from_serving() -> None:
    assert lead(_rank_views(S.READY, S.WAITING, S.READY)).info.rank == 1
    assert lead(_rank_views(S.STOPPED, S.FAILED, S.STOPPING)).info.rank == 1
    assert lead(_rank_views(S.READY, S.READY)).info.rank == 0
    assert lead(_rank_views(S.STOPPED, S.STOPPING)).info.rank == 1      # down: rank 0 ended first, rank 1 ends
    both_failed = _rank_views(S.FAILED, S.FAILED)
    assert lead(both_failed).info.rank == 0
    assert lead(both_failed, cause="decode@1").info.rank == 1            # the engine's blame decides
    assert lead(_rank_views(S.STARTING, S.READY), cause="decode@1").info.rank == 0   # a retry: blame is over


def test_a_pinned_line_of_another_rank_names_its_node() -> None:
    views = _rank_views(S.FAILED, S.FAILED)
    views[0].pinned, views[1].pinned = "its server's rank 1 on gpu-1 failed", "CUDA out of memory"
    assert pinned(views, cause="decode@1") == ("rank 1 on gpu-1: ", "CUDA out of memory")
    assert pinned(views) == ("", "its server's rank 1 on gpu-1 failed")


def test_node_labels_are_hosts_unless_two_ranks_share_one() -> None:
    views = _rank_views(S.PENDING, S.PENDING)
    assert node_labels([v.info for v in views]) == ["gpu-0", "gpu-1"]
    shared = [dataclasses.replace(v.info, host="box") for v in views]
    assert node_labels(shared) == ["0:box", "1:box"]


def test_a_starting_ranks_row_says_how_long_it_has_been_silent_from_a_minute() -> None:
    view = _rank_views(S.WAITING)[0]
    view.since = 10.0
    assert "no line for" not in node_line(view, 69.0)
    assert node_line(view, 70.0).endswith("no line for 1m")
    assert node_line(view, 400.0, last_line=200.0).endswith("no line for 3m")
    view.state = S.READY
    assert "no line for" not in node_line(view, 400.0)


def test_a_job_over_several_nodes_shows_each_nodes_gpus() -> None:
    job = JobStatus("decode", "12", "RUNNING", "", "node1", (0, 1), nodes=(("node1", (0, 1)), ("node2", (2, 3))))
    info = dataclasses.replace(PREFILL, gpus=(), numa=None, after=())
    assert placement(info, job) == "job 12 RUNNING on node1 · node1 GPU 0 1 · node2 GPU 2 3 · :30000"
    assert placement(info, dataclasses.replace(job, nodes=())) == "job 12 RUNNING on node1 · GPU 0 1 · :30000"


@pytest.mark.parametrize("source", ["(a+)+$", "(a|aa)*b"])
def test_a_filter_that_can_take_exponential_time_is_refused_saying_why(source: str) -> None:
    """The filter runs on every line of a log in the process that draws the screen: a web viewer who only watches
    could stall their session with it."""
    with pytest.raises(re.error, match="exponential time"):
        compile_filter(source)
    assert compile_filter("out of memory|NCCL") is not None and compile_filter("") is None
