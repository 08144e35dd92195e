"""The TUI driven by a scripted event source through Textual's Pilot."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from textual.app import App
from textual.drivers.headless_driver import HeadlessDriver
from textual.widget import Widget
from textual.widgets import Footer, Input
from ui_fakes import RecordingApp, log_lines, make_app, screen_text, settle

from pdtui.engine.events import (
    CanaryResult,
    Done,
    JobStatus,
    LineKind,
    LogLines,
    LogRecord,
    PhaseStarted,
    PlanReady,
    PreflightFinding,
    ServiceInfo,
    ServingFigures,
    StateChanged,
    Step,
    StepChanged,
    StepStatus,
    UnitStatus,
)
from pdtui.engine.intent import RestartHow
from pdtui.engine.states import ServiceState as S
from pdtui.sim.scripted import (
    HOSTILE_LINES,
    OOM_LINE,
    PLAN,
    T0,
    ScriptedSource,
    decode_failed_script,
    failed_after_ready_script,
    hostile_script,
    ready_script,
    starting_script,
)
from pdtui.ui.app import PdtuiApp, terminal_driver
from pdtui.ui.logview import FLOOD_PAINT_INTERVAL, PAINT_INTERVAL
from pdtui.ui.screens import ConfirmScreen, HelpScreen, QuitScreen, RestartScreen
from pdtui.vocabulary.figures import Figures


def badge(app: PdtuiApp, service: str) -> str:
    return app.deployment.panels[service].view.badge(app.deployment.elapsed.now())


def burst(service: str, count: int, start: int = 0) -> LogLines:
    records = tuple(LogRecord(f"line {i}", LineKind.NORMAL, T0 + i) for i in range(start, start + count))
    return LogLines(service, records, 50.0)


async def test_badges_and_plan_strip_follow_the_states() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        assert badge(app, "prefill") == "○ pending"
        source.emit(
            StepChanged(Step.PREFLIGHT, StepStatus.DONE, elapsed=1.0),
            StepChanged(Step.START_BACKENDS, StepStatus.RUNNING, elapsed=1.0),
            StateChanged("prefill", S.PENDING, S.STARTING, elapsed=1.0),
            StateChanged("prefill", S.STARTING, S.WAITING, elapsed=3.0),
            StateChanged("router", S.PENDING, S.BLOCKED, "decode failed", elapsed=9.0),
        )
        await settle(pilot)
        assert badge(app, "prefill") == "◐ waiting 0:08"
        assert badge(app, "router") == "⊘ blocked"
        assert app.deployment.panels["prefill"].has_class("-waiting")
        strip = app.deployment.plan.render().plain
        assert "✓ preflight" in strip and "◐ start backends" in strip and "○ probe router" in strip
        source.emit(StateChanged("prefill", S.WAITING, S.READY, elapsed=41.0, time_to_ready=40.0))
        await settle(pilot)
        assert "✓ READY 0:40" in screen_text(app)


async def test_the_preflights_findings_are_listed_under_the_steps_then_counted_once_ready() -> None:
    warning = PreflightFinding("warning", "fabric", "decode", "gpu0", "nvidia_peermem", ("loaded", "not loaded"),
                               ("its unit", "/sys/module on gpu0"), "decode: nvidia_peermem is not loaded on gpu0", 0.4)
    forced = dataclasses.replace(warning, level="error", setting="IB port",
                                 text="prefill: mlx5_0 on gpu0 has no active port (port 1: DOWN)")
    script = ready_script()
    app, source = make_app([*script[:-1], warning, forced])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        lines = app.deployment.plan.render().plain.splitlines()
        assert lines[-2:] == ["✗ prefill: mlx5_0 on gpu0 has no active port (port 1: DOWN)",
                              "⚠ decode: nvidia_peermem is not loaded on gpu0"]
        source.emit(script[-1])       # ready (--force started it despite the refusal)
        await settle(pilot)
        lines = app.deployment.plan.render().plain.splitlines()
        assert lines[-1] == "preflight: 1 refusal overridden (--force), 1 warning (in the panels)"
        assert lines[1].startswith("✓ ready in") and len(lines) == 3


async def test_verdict_lists_time_to_ready_per_service() -> None:
    app, _ = make_app(ready_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        assert "✓ ready in 0:59 — prefill 0:40 · decode 0:46 · router 0:12" in screen_text(app)


async def test_elapsed_counter_uses_the_injected_clock() -> None:
    now = [1000.0]
    app, _ = make_app(starting_script(), clock=lambda: now[0])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        now[0] += 13.0
        app.deployment.tick()
        await settle(pilot)
        assert "bring-up 1:00" in screen_text(app)


async def test_failure_line_stays_pinned_under_the_header() -> None:
    app, source = make_app(decode_failed_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        source.emit(burst("decode", 200))  # the OOM line scrolls out of the tail...
        await settle(pilot)
        assert not any("CUDA out of memory" in line for line in log_lines(app.deployment.panels["decode"].log_view))
        assert "✗ [09:06:38 TP0] Exception: Capture cuda graph failed: CUDA out of memory" in screen_text(app)


async def test_a_narrow_panel_draws_the_lines_stamps_without_their_date_and_a_zoomed_one_with_it() -> None:
    app, _ = make_app(decode_failed_script())
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        decode = app.deployment.panels["decode"]
        assert decode.log_view.size.width < 120
        assert "[09:06:09 TP0] Init torch distributed ends." in log_lines(decode.log_view)[0]
        assert "✗ [09:06:38 TP0] Exception: Capture cuda graph failed" in screen_text(app), "the pinned line too"
        decode.log_view.focus()
        await pilot.press("z")
        await settle(pilot)
        assert "[2025-10-16 09:06:09 TP0] Init torch distributed ends." in log_lines(decode.log_view)[0]
        assert "✗ [2025-10-16 09:06:38 TP0] Exception" in screen_text(app)
        assert next(decode.log_view.rows()).shown.startswith("[2025-10-16 09:06:09 TP0]"), "the kept line is whole"


async def test_a_blocked_router_folds_to_its_header_lines_and_unfolds_when_retried() -> None:
    for size in ((200, 50), (60, 30)):
        app, source = make_app(decode_failed_script())
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            router = app.deployment.panels["router"]
            border = 0 if app.screen.has_class("-narrow") else 2
            assert router.outer_size.height == 3 + border, "title, placement, why it is blocked"
            assert "⊘ decode failed" in screen_text(app)
            source.emit(StateChanged("router", S.BLOCKED, S.PENDING, "retry", elapsed=40.0))
            await settle(pilot)
            assert router.outer_size.height > 3 + border + 3, "waiting for its start, it has its share again"


async def test_the_verdict_follows_a_prefill_that_gets_ready_after_the_outcome() -> None:
    app, source = make_app(decode_failed_script())
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        told = "✗ failed after 0:38 — decode: CUDA out of memory · router not started · prefill waiting"
        assert told in screen_text(app)
        source.emit(StateChanged("prefill", S.WAITING, S.READY, "all checks hold", None, 41.0, time_to_ready=40.0))
        await settle(pilot)
        assert "decode: CUDA out of memory · router not started · prefill 0:40 ready" in screen_text(app)
        assert "prefill waiting" not in screen_text(app)


ALL_DONE = "✓ preflight ── ✓ start backends ── ✓ wait for readiness ── ✓ start router ── ✓ probe router ── ✓ ready"
CRASH = "after ready: scheduler crashed (TP0): RuntimeError: NCCL communicator was aborted on rank 0."


async def test_a_failure_after_ready_keeps_the_steps_and_says_when_it_was_ready_and_when_it_failed() -> None:
    script = failed_after_ready_script()
    app, source = make_app(script[:-1])         # the crash told, its outcome not yet
    async with app.run_test(size=(240, 50)) as pilot:
        await settle(pilot)
        told = f"✗ ready at 0:59 · failed 2:47 later, at 3:46 — decode: {CRASH} · prefill 0:40 ready · router 0:12 ready"
        assert app.deployment.plan.render().plain.splitlines() == [ALL_DONE, told]
        source.emit(script[-1])
        await settle(pilot)
        assert app.deployment.plan.render().plain.splitlines() == [ALL_DONE, told]
        assert app.notices[-1] == ("dsv4-flash-pd failed after it was ready: decode (ready at 0:59 · failed 2:47 later, "
                                   "at 3:46)")


async def test_a_router_degraded_after_ready_says_since_when_and_its_time_to_ready_once_it_passes_again() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(240, 50)) as pilot:
        await settle(pilot)
        source.emit(StateChanged("router", S.READY, S.DEGRADED, "canary failed: HTTP 500", None, 120.0))
        await settle(pilot)
        assert app.deployment.plan.render().plain.splitlines() == [
            ALL_DONE, "⚠ ready at 0:59 · degraded 1:01 later, at 2:00 — router degraded: canary failed: HTTP 500 · "
                      "prefill 0:40 ready · decode 0:46 ready"]
        source.emit(StateChanged("router", S.DEGRADED, S.READY, "canary passes again: 0.4 s", None, 150.0))
        await settle(pilot)
        assert app.deployment.plan.render().plain.splitlines()[1] == "✓ ready in 0:59 — prefill 0:40 · decode 0:46 · router 0:12"


async def test_an_outcome_told_while_the_router_is_degraded_names_it_degraded_and_all_ready_once_it_passes() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(240, 50)) as pilot:
        await settle(pilot)
        source.emit(StateChanged("router", S.READY, S.DEGRADED, "canary failed: HTTP 500", None, 120.0),
                    Done(False, 1, {"prefill": 40.0, "decode": 46.0}, {"router": "canary failed: HTTP 500"},
                         elapsed=130.0, ready_at=59.0))
        await settle(pilot)
        assert app.deployment.plan.render().plain.splitlines()[1] == (
            "⚠ ready at 0:59 · degraded 1:01 later, at 2:00 — router degraded: canary failed: HTTP 500 · "
            "prefill 0:40 ready · decode 0:46 ready")
        source.emit(StateChanged("router", S.DEGRADED, S.READY, "canary passes again: 0.4 s", None, 150.0))
        await settle(pilot)
        assert app.deployment.plan.render().plain.splitlines()[1] == "✓ ready at 0:59 — prefill 0:40 · decode 0:46 · router 0:12"


async def test_a_crash_pins_the_exception_its_traceback_ended_in_not_the_header() -> None:
    header = "[2026-06-09 11:38:45 TP5] Scheduler hit an exception: Traceback (most recent call last):"
    reason = "scheduler crashed (TP5): RuntimeError: Mooncake memory registration failed."
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 40)) as pilot:
        source.emit(StateChanged("decode", S.PENDING, S.STARTING, elapsed=1.0),
                    StateChanged("decode", S.STARTING, S.WAITING, elapsed=1.5),
                    StateChanged("decode", S.WAITING, S.FAILED, reason, header, 30.0))
        await settle(pilot)
        assert "✗ scheduler crashed (TP5): RuntimeError: Mooncake memory registration" in screen_text(app)
        assert "Scheduler hit an exception" not in screen_text(app)


async def test_follow_key_pauses_and_keeps_position_while_lines_arrive() -> None:
    app, source = make_app([PLAN, burst("prefill", 100)])
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        view = app.deployment.panels["prefill"].log_view
        assert view.has_focus and view.follow
        assert log_lines(view)[-1].startswith("line 99")
        await pilot.press("f")
        view.scroll_to(y=10, animate=False, immediate=True)
        await settle(pilot)
        shown = log_lines(view)
        source.emit(burst("prefill", 50, start=100))
        await settle(pilot)
        assert not view.follow and log_lines(view) == shown
        assert "⏸ paused" in screen_text(app)
        await pilot.press("f")
        await settle(pilot)
        assert log_lines(view)[-1].startswith("line 149")


async def test_paused_view_holds_its_lines_when_the_buffer_drops_old_ones() -> None:
    app, source = make_app([PLAN, burst("prefill", 40)], log_limit=40)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        view = app.deployment.panels["prefill"].log_view
        await pilot.press("f")
        view.scroll_to(y=20, animate=False, immediate=True)
        await settle(pilot)
        first = log_lines(view)[0]
        source.emit(burst("prefill", 5, start=40))
        await settle(pilot)
        assert view.total == 40
        assert log_lines(view)[0] == first


async def test_filter_key_shows_only_matching_lines() -> None:
    app, _ = make_app(decode_failed_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("tab", "slash", *"out of memory", "enter")
        await settle(pilot)
        view = app.deployment.panels["decode"].log_view
        assert [row.text for row in view.visible_rows()] == ["[2025-10-16 09:06:38 TP0] " + OOM_LINE]
        assert "filter /out of memory/ 1 of 8" in screen_text(app)
        assert view.has_focus
        await pilot.press("slash", "ctrl+u", "enter")  # empty pattern clears the filter
        await settle(pilot)
        assert view.row_count == 8


async def test_invalid_regex_is_reported_inline_and_leaves_the_log_alone() -> None:
    app, _ = make_app(decode_failed_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("slash", "(", "enter")
        await settle(pilot)
        assert "invalid regex: missing ), unterminated subpattern" in screen_text(app)
        assert isinstance(app.focused, Input)
        assert app.deployment.panels["prefill"].log_view.pattern is None
        await pilot.press("escape")
        await settle(pilot)
        assert app.focused is app.deployment.panels["prefill"].log_view


async def test_zoom_fills_the_screen_with_the_focused_panel_and_back() -> None:
    app, _ = make_app(decode_failed_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("tab", "z")
        await settle(pilot)
        assert app.screen.maximized is app.deployment.panels["decode"]
        assert "sglang-dsv4-prefill" not in screen_text(app)
        await pilot.press("z")
        await settle(pilot)
        assert app.screen.maximized is None
        assert "sglang-dsv4-prefill" in screen_text(app)


async def test_tab_and_shift_tab_move_between_panels() -> None:
    app, _ = make_app(starting_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        panels = app.deployment.panels
        assert app.focused is panels["prefill"].log_view
        await pilot.press("tab")
        assert app.focused is panels["decode"].log_view
        await pilot.press("tab")
        assert app.focused is panels["router"].log_view
        await pilot.press("shift+tab", "shift+tab")
        assert app.focused is panels["prefill"].log_view


async def test_retry_asks_the_source_to_retry_the_focused_failed_service() -> None:
    app, source = make_app(decode_failed_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("r")  # prefill is still waiting: nothing to retry
        await pilot.press("tab", "r")
        await settle(pilot)
        assert source.retries == ["decode"]
        source.emit(StateChanged("decode", S.FAILED, S.PENDING, elapsed=60.0))
        await settle(pilot)
        assert app.deployment.in_progress and "failed after" not in screen_text(app)


async def test_quit_during_bring_up_asks_and_exits_130_naming_started_units() -> None:
    app, _ = make_app(starting_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)
        assert "sglang-dsv4-prefill, sglang-dsv4-decode" in screen_text(app)
        await pilot.press("n")
        await settle(pilot)
        assert not isinstance(app.screen, QuitScreen)
        await pilot.press("q", "y")
        await settle(pilot)
    assert app.return_value == 130
    assert app.exit_summary == (
        "pdtui: left running (pdtui never stops services): sglang-dsv4-prefill, sglang-dsv4-decode"
    )


async def test_quit_after_done_exits_at_once_with_the_bring_up_exit_code() -> None:
    app, _ = make_app(decode_failed_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
    assert app.return_value == 1
    assert app.exit_summary.endswith("sglang-dsv4-prefill, sglang-dsv4-decode")


async def test_quit_closes_the_source_before_the_screens_go_and_ignores_lines_still_in_flight() -> None:
    class LateLines(ScriptedSource):
        """A tail whose last batch is emitted while it closes."""

        screens_at_close = -1

        async def close(self) -> None:
            self.screens_at_close = len(app.screen_stack)
            self.emit(burst("prefill", 5, 100), StateChanged("decode", S.WAITING, S.READY, elapsed=60.0))
            await super().close()

    source = LateLines(starting_script())
    app = PdtuiApp(source, clock=lambda: 0.0)  # type: ignore[arg-type]
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("q", "y")
        await settle(pilot)
    assert source.closed and source.screens_at_close >= 1
    assert app.return_value == 130
    assert app.deployment.panels["decode"].view.state is S.WAITING


async def test_quit_after_done_closes_the_source_too() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
    assert source.closed and app.return_value == 0


async def test_elapsed_ticker_stops_when_the_bring_up_is_done_and_runs_again_on_retry() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        calls: list[str] = []
        app.deployment.ticker.pause = lambda: calls.append("pause")  # type: ignore[method-assign]
        app.deployment.ticker.resume = lambda: calls.append("resume")  # type: ignore[method-assign]
        source.emit(*decode_failed_script()[1:])
        await settle(pilot)
        assert calls == ["pause"]
        source.emit(StateChanged("decode", S.FAILED, S.STARTING, elapsed=70.0))
        await settle(pilot)
        assert calls == ["pause", "resume"]


async def test_title_bar_repaints_only_when_the_shown_time_changes() -> None:
    app, _ = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        repaints: list[None] = []
        app.deployment.title_bar.refresh = lambda *a, **k: repaints.append(None)  # type: ignore[method-assign]
        app.deployment.title_bar.show_elapsed(app.deployment.title_bar.elapsed + 0.2)
        assert repaints == []
        app.deployment.title_bar.show_elapsed(app.deployment.title_bar.elapsed + 1.0)
        assert len(repaints) == 1


@pytest.mark.parametrize(("width", "shown"), [(160, "/etc/pdtui/dsv4-flash-pd.yaml"), (60, "…i/dsv4-flash-pd.yaml"),
                                              (40, None)])
async def test_title_bar_names_the_config_file_cut_from_its_start_then_left_out(width: int, shown: str | None) -> None:
    app, _ = make_app([PLAN])
    async with app.run_test(size=(width, 24)) as pilot:
        await settle(pilot)
        line = app.deployment.title_bar.render().plain
    assert line.startswith(f"pdtui · dsv4-flash-pd  {shown} ") if shown else "yaml" not in line
    assert line.rstrip().endswith("bring-up 0:00")


async def test_scrollbar_and_follow_track_a_growing_log() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        view = app.deployment.panels["prefill"].log_view
        for start in range(0, 300, 100):
            source.emit(burst("prefill", 100, start))
            await settle(pilot)
            assert view.vertical_scrollbar.window_virtual_size == view.row_count == start + 100
            assert view.scroll_y == view.max_scroll_y > 0
            assert log_lines(view)[-1].rstrip() == f"line {start + 99}"


async def test_rows_kept_by_their_line_are_drawn_as_textuals_styles_draw_them_and_reused_as_the_log_moves() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        view = app.deployment.panels["prefill"].log_view
        source.emit(burst("prefill", 200, 0))
        await settle(pilot)
        whole = view.size.region
        assert view._plain_box()
        assert view.render_lines(whole) == Widget.render_lines(view, whole)    # Textual's own path, uncached
        made: list[int] = []
        render_line = view.render_line
        view.render_line = lambda y: (made.append(y), render_line(y))[1]     # type: ignore[method-assign]
        source.emit(burst("prefill", 1, 200))
        await settle(pilot)
        assert made == [whole.height - 1], "only the new line's row was made"
        assert view.render_lines(whole) == Widget.render_lines(view, whole)
        view.styles.padding = (0, 1)                  # a box around the rows: Textual's styles draw them
        await settle(pilot)
        assert not view._plain_box()
        assert log_lines(view)[-1].strip() == "line 200"


async def test_a_burst_of_batches_is_painted_once_per_beat_and_then_shows_the_last_line() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        view = app.deployment.panels["prefill"].log_view
        repaints = []
        paint = view._paint
        view._paint = lambda: (repaints.append(1), paint())
        for start in range(0, 1000, 10):          # 100 batches before the loop breathes
            view.append(burst("prefill", 10, start).lines)
        assert len(repaints) <= 1 and view.paint_pending
        await settle(pilot)
        assert len(repaints) <= 2 and not view.paint_pending
        assert view.scroll_y == view.max_scroll_y and log_lines(view)[-1].rstrip() == "line 999"


async def test_a_log_scrolling_more_than_a_screenful_per_paint_repaints_half_as_often() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        view = app.deployment.panels["prefill"].log_view
        source.emit(burst("prefill", view.size.height + 1))
        await settle(pilot)
        assert view.paint_interval == FLOOD_PAINT_INTERVAL
        source.emit(burst("prefill", 2, start=1000))
        await settle(pilot)
        assert view.paint_interval == PAINT_INTERVAL
        assert log_lines(view)[-1].rstrip() == "line 1001"


async def test_a_tagged_view_given_lines_without_tags_tags_them_with_its_own() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        view = app.deployment.merged.log_view
        view.tag = "all"
        view.append(burst("prefill", 3).lines)
        assert [(row.tag, row.text) for row in view.rows()] == [("all", "line 0"), ("all", "line 1"), ("all", "line 2")]


async def test_all_logs_view_interleaves_services_by_time_with_tags() -> None:
    app, source = make_app(starting_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        merged = app.deployment.merged.log_view
        assert app.focused is merged
        drawn = [line.rstrip() for line in log_lines(merged) if line.strip()]
        assert drawn[:4] == [
            "prefill │ [2025-10-16 09:06:09 TP0] Init torch distributed ends. mem usage=1.96 GB",
            "decode  │ [2025-10-16 09:06:09 TP0] Init torch distributed ends. mem usage=1.96 GB",
            "prefill │ [2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB",
            "decode  │ [2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB",
        ]
        source.emit(LogLines("router", (LogRecord("router up", LineKind.NORMAL, T0 + 60),), 60.0))
        await settle(pilot)
        assert "router  │ router up" in screen_text(app)
        await pilot.press("a")
        await settle(pilot)
        assert app.focused is app.deployment.panels["prefill"].log_view


async def test_save_writes_the_focused_log_and_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app, _ = make_app(hostile_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        saved = tmp_path / "pdtui-dsv4-flash-pd-prefill.log"
        assert saved.exists()
        assert any(str(saved) in notice for notice in app.notices)
    content = saved.read_text(encoding="utf-8")
    assert "\x1b" not in content and "␛]52;c;cm0gLXJmIH4=␇ clipboard write (OSC 52)" in content
    assert content.count("\n") == app.deployment.panels["prefill"].log_view.total
    assert "A" * (1024 * 1024) in content  # the saved copy is never capped


async def test_hostile_lines_are_drawn_inert() -> None:
    app, _ = make_app(hostile_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        view = app.deployment.panels["prefill"].log_view
        strips = [view.render_line(y) for y in range(view.scrollable_content_region.height)]
        drawn = "\n".join(strip.text for strip in strips)
        for expected in (
            "red via CSI and ␛[2J clear screen",
            "␛]52;c;cm0gLXJmIH4=␇ clipboard write (OSC 52)",
            "␛]0;pwned title␇ title change (OSC 0)",
            "[bold red]x[/] markup stays text",
            "[link=file:///etc/passwd]click[/link]",
            "NUL␀ BEL␇ BS␈ DEL␡ C1\\x9b end",
            "invalid utf-8 decoded: �� bytes",
        ):
            assert expected in drawn
        assert not any(ord(ch) < 0x20 and ch != "\n" for ch in drawn)
        segments = [segment for strip in strips for segment in strip]
        assert all(segment.style is None or not segment.style.link for segment in segments)
        assert all(segment.control is None for segment in segments)
        long_row = next(row for row in view.rows() if row.text == HOSTILE_LINES[0])
        assert len(long_row.shown) < 4200 and long_row.shown.endswith(" more)")


async def test_done_rings_the_bell_toasts_and_sends_osc9_through_tmux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")
    app, _ = make_app(ready_script(), follow_up_text="router on :30001")
    written: list[str] = []
    bells: list[bool] = []
    app.write_escape = written.append  # type: ignore[method-assign]
    app.bell = lambda: bells.append(True)  # type: ignore[method-assign]
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        assert bells == [True]
        assert written == ["\x1bPtmux;\x1b\x1b]9;pdtui: dsv4-flash-pd is ready (0:59) — router on :30001\x07\x1b\\"]
        assert any("dsv4-flash-pd is ready" in notice for notice in app.notices)


async def test_escapes_are_written_by_the_driver_that_handed_itself_to_the_app() -> None:
    app, _ = make_app([])
    assert issubclass(app.driver_class, App.get_driver_class(app))   # the platform's driver, which tells the app
    driver = terminal_driver(HeadlessDriver)(app)
    assert app.terminal is driver
    written: list[str] = []
    driver.write = written.append  # type: ignore[method-assign]
    app.write_escape("\x1b]9;pdtui: ready\x07")
    assert written == ["\x1b]9;pdtui: ready\x07"]


async def test_help_key_lists_the_keys() -> None:
    app, _ = make_app(starting_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        assert "retry the focused service" in screen_text(app)
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, HelpScreen)


async def test_narrow_pane_keeps_every_badge_and_time_visible() -> None:
    app, _ = make_app(decode_failed_script())
    async with app.run_test(size=(60, 20)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert app.screen.has_class("-narrow")
        assert not any(ch in text for ch in "┏╭│┃")  # compact panels: no borders, even when focused
        for shown in ("◐ waiting 0:37", "✗ FAILED 0:37", "⊘ blocked", "bring-up 0:38"):
            assert shown in text


async def test_log_buffer_is_bounded_by_log_limit() -> None:
    app, source = make_app([PLAN], log_limit=100)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        for start in range(0, 1000, 250):
            source.emit(burst("prefill", 250, start))
        await settle(pilot)
        rows = list(app.deployment.panels["prefill"].log_view.rows())
        assert len(rows) == 100 and rows[0].text == "line 900" and rows[-1].text == "line 999"


async def test_an_engine_crash_is_one_notice_and_a_failed_exit() -> None:
    class Crashing(ScriptedSource):
        async def run(self) -> Done:
            raise RuntimeError("host gpu0 unreachable")

    app = RecordingApp(Crashing(), clock=lambda: 0.0)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        assert app.notices == ["bring-up stopped: host gpu0 unreachable"]
        await pilot.press("q")
        await settle(pilot)
    assert app.return_value == 1


async def test_no_color_marks_the_app_so_line_kinds_stay_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app, _ = make_app(starting_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        assert app.no_color and app.has_class("-no-color")


def test_bad_theme_name_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="unknown theme 'neon'; available themes: dark, light"):
        PdtuiApp(ScriptedSource(), theme="neon")


async def test_command_palette_offers_every_key_action() -> None:
    app, _ = make_app(starting_script())
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        titles = {command.title for command in app.get_system_commands(app.screen)}
    assert {"Follow / pause", "Filter", "Zoom", "Retry", "All logs", "Save log", "Help", "Quit"} <= titles


def background(widget: Widget) -> str:
    return widget.rich_style.bgcolor.triplet.hex  # type: ignore[union-attr]


async def test_light_theme_switches_textual_widgets_too() -> None:
    app, _ = make_app(ready_script(), theme="light")
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        assert app.theme == "pdtui-light" and not app.current_theme.dark
        assert background(app.deployment.panels["prefill"].log_view) == "#ffffff"
        assert background(app.query_one(Footer)) == "#d0d0d0"   # the light theme's panel colour


async def test_a_textual_theme_from_the_palette_keeps_the_chosen_pd_colours() -> None:
    app, _ = make_app(ready_script(), theme="light")
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        assert {"pdtui-dark", "pdtui-light", "nord"} <= set(app.available_themes)
        app.theme = "nord"
        await settle(pilot)
        assert background(app.deployment.panels["prefill"].log_view) == "#ffffff"
        app.theme = "pdtui-dark"
        await settle(pilot)
        assert background(app.deployment.panels["prefill"].log_view) == "#0f1117"


async def test_restart_key_shows_the_exact_command_and_host_and_restarts_only_on_yes() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("tab", "R")     # focus decode
        await settle(pilot)
        assert isinstance(app.screen, RestartScreen)
        text = screen_text(app)
        assert "systemctl restart sglang-dsv4-decode" in text and "gpu0" in text
        assert "y  drain: out of router, its requests finished, restarted, proven, back in; router keeps serving" in text
        assert "rolling:" not in text, "a lone decode has no role to roll"
        await pilot.press("n")
        await settle(pilot)
        assert source.actions == [] and not isinstance(app.screen, RestartScreen)
        await pilot.press("R", "y")
        await settle(pilot)
        assert source.actions == [("restart", "decode")] and source.restarts_how == [RestartHow.DRAIN]
        await pilot.press("R", "exclamation_mark")
        await settle(pilot)
        assert source.restarts_how == [RestartHow.DRAIN, RestartHow.NOW]
        await pilot.press("R", "o")     # not offered: nothing happens but the screen closing
        await settle(pilot)
        assert source.restarts_how == [RestartHow.DRAIN, RestartHow.NOW] and not isinstance(app.screen, RestartScreen)
        source.emit(StateChanged("router", S.READY, S.PENDING, "waiting for decode", elapsed=30.0))
        await settle(pilot)
        assert "… waiting for decode" in screen_text(app)


async def test_stop_key_asks_first_and_stops_the_focused_service() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        assert "systemctl stop sglang-dsv4-prefill" in screen_text(app)
        await pilot.press("y")
        await settle(pilot)
        assert source.actions == [("stop", "prefill")]


async def test_the_title_says_the_screen_watches_when_it_only_looks() -> None:
    watching = dataclasses.replace(PLAN, title="watching", watching=True)
    app, _ = make_app([watching])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "watching 0:00" in screen_text(app)


async def test_a_service_found_running_shows_its_uptime_not_a_time_to_ready() -> None:
    watching = dataclasses.replace(PLAN, title="watching", watching=True)
    app, source = make_app([watching])
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        source.emit(UnitStatus("decode", "active", "running", "abc", "Tue 2026-12-01 12:00:00 UTC", 3725.0, 42, 1.0),
                    StateChanged("decode", S.PENDING, S.WAITING, "attached", elapsed=1.0),
                    StateChanged("decode", S.WAITING, S.READY, "all checks hold", elapsed=1.5))
        await settle(pilot)
        assert badge(app, "decode").startswith("✓ READY up 1:02:")


async def test_the_phase_bar_follows_the_start_up_phases_and_a_restart_clears_it() -> None:
    app, source = make_app([PLAN])
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        assert "weights" not in screen_text(app)
        source.emit(
            StateChanged("decode", S.PENDING, S.STARTING, elapsed=1.0),
            PhaseStarted("decode", "weights", 2.0, at=1000.0),
            PhaseStarted("decode", "kv_cache", 43.0, at=1041.0),
            PhaseStarted("decode", "cuda_graphs", 46.0, at=1044.0),
        )
        await settle(pilot)
        assert "weights 41s · kv 3.0s · graphs 0.0s…" in screen_text(app)
        source.emit(StateChanged("decode", S.STARTING, S.PENDING, "waiting for prefill", elapsed=50.0))
        await settle(pilot)
        assert "weights 41s" not in screen_text(app)


async def test_a_phase_three_times_slower_than_last_time_is_flagged_in_its_bar_and_a_toast() -> None:
    app, source = make_app([PLAN], baseline={"decode": {"weights": 13.0}})
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        source.emit(PhaseStarted("decode", "weights", 1.0, at=1000.0), PhaseStarted("decode", "kv_cache", 42.0, at=1041.0))
        await settle(pilot)
        assert "weights 41s (last 13s, 3.2×)" in screen_text(app)
        assert app.notices == ["decode: weights took 41s, 3.2× the last successful run's 13s"]


async def test_the_phase_under_way_shows_its_running_time_and_its_last_length():
    now = [0.0]
    app, source = make_app([PLAN], baseline={"decode": {"cuda_graphs": 41.0}}, clock=lambda: now[0])
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        source.emit(StateChanged("decode", S.PENDING, S.STARTING, elapsed=1.0),
                    StateChanged("decode", S.STARTING, S.WAITING, elapsed=1.5),
                    PhaseStarted("decode", "cuda_graphs", 2.0, at=1000.0))
        await settle(pilot)
        now[0] += 60.0
        app.deployment.tick()
        await settle(pilot)
        assert "graphs 1m00s… (last 41s)" in screen_text(app)
        now[0] += 70.0
        app.deployment.tick()
        await settle(pilot)
        assert "graphs 2m10s… (last 41s, 3.2×)" in screen_text(app)


async def test_a_jobs_panel_shows_its_job_id_node_and_the_gpus_slurm_gave() -> None:
    job = ServiceInfo("decode", "decode", "pd-decode", "hpc", (), None, 30002, (), 360.0,
                      "scancel --me --name=pd-decode; sbatch /o/pd-decode.sbatch", "scancel --me --name=pd-decode",
                      job=True)
    app, source = make_app([PlanReady("pd", (job,), tuple(Step))])
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        assert "decode  job pd-decode @ hpc" in screen_text(app)
        source.emit(StateChanged("decode", S.PENDING, S.STARTING, "sbatch /o/pd-decode.sbatch", elapsed=0.5),
                    JobStatus("decode", "12", "PENDING", "Resources", elapsed=0.6),
                    StateChanged("decode", S.STARTING, S.QUEUED, "submitted: job 12 pending (Resources)", elapsed=0.6))
        await settle(pilot)
        assert badge(app, "decode").startswith("◌ queued") and "job 12 PENDING · :30002" in screen_text(app)
        source.emit(JobStatus("decode", "12", "RUNNING", "", "gpu07", (4, 5, 6, 7), elapsed=3.0),
                    StateChanged("decode", S.QUEUED, S.WAITING, "started: job 12 running on gpu07", elapsed=3.0,
                                 job_id="12", node="gpu07"))
        await settle(pilot)
        assert "job 12 RUNNING on gpu07 · GPU 4 5 6 7 · :30002" in screen_text(app)
        shown = [line.rstrip() for line in log_lines(app.deployment.panels["decode"].log_view) if line.strip()]
        assert shown == ["· job 12 PENDING (Resources)", "· job 12 RUNNING on gpu07"]


async def test_a_failed_canary_degrades_the_router_with_a_toast_and_bell_and_a_passing_one_restores_it() -> None:
    app, source = make_app(ready_script())
    bells: list[bool] = []
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        app.bell = lambda: bells.append(True)  # type: ignore[method-assign]
        ready_badge = badge(app, "router")
        source.emit(CanaryResult("router", True, "answer 'OK' in 41 ms", 0.041, 70.0))
        await settle(pilot)
        assert "✓ canary 41 ms" in screen_text(app)
        source.emit(CanaryResult("router", False, "HTTP 500: scheduler returned no output", 0.01, 100.0),
                    StateChanged("router", S.READY, S.DEGRADED, "canary failed: HTTP 500: scheduler returned no output",
                                 elapsed=100.0))
        await settle(pilot)
        assert badge(app, "router").startswith("▼ DEGRADED")
        assert "▼ canary failed: HTTP 500" in screen_text(app)
        assert "✗ canary" in screen_text(app)
        assert bells == [True]
        assert app.notices[-1] == "router degraded: canary failed: HTTP 500: scheduler returned no output"
        source.emit(CanaryResult("router", True, "answer 'OK' in 38 ms", 0.038, 130.0),
                    StateChanged("router", S.DEGRADED, S.READY, "canary passes again: answer 'OK' in 38 ms",
                                 elapsed=130.0))
        await settle(pilot)
        assert badge(app, "router") == ready_badge, "its time to ready stands"
        assert "▼ canary failed" not in screen_text(app), "the pinned reason goes"
        assert app.notices[-1].startswith("router ready again")
        assert bells == [True]


def served(service: str, tps: float, elapsed: float, **figures: object) -> ServingFigures:
    return ServingFigures(service, "metrics", Figures(generation_tps=tps, **figures), elapsed=elapsed)  # type: ignore[arg-type]


async def test_a_serving_decode_shows_its_figures_and_a_sparkline_that_moves() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(180, 50)) as pilot:
        await settle(pilot)
        assert "tok/s" not in screen_text(app), "no figures before the first sample"
        source.emit(served("decode", 812.4, 61.0, running=12, queued=0, token_usage=0.012, ttft_p50=0.084))
        await settle(pilot)
        assert "812 tok/s · 12 running · 0 queued · KV 1% · TTFT p50 84 ms" in screen_text(app)
        source.emit(served("decode", 1630.0, 63.0, running=20, queued=3, token_usage=0.02, ttft_p50=0.12))
        await settle(pilot)
        assert "1.6k tok/s · 20 running · 3 queued" in screen_text(app)
        assert app.deployment.panels["decode"].figures.sparkline.data == [812.4, 1630.0]
        source.emit(StateChanged("decode", S.READY, S.PENDING, "restart", elapsed=70.0))
        await settle(pilot)
        assert "tok/s" not in screen_text(app), "a server that stopped serving shows no figures"


async def test_an_idle_servers_samples_alike_repaint_nothing_and_a_change_repaints() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(180, 50)) as pilot:
        await settle(pilot)
        row = app.deployment.panels["decode"].figures
        for n in range(2):
            source.emit(served("decode", 0.0, 61.0 + 3 * n, running=0, queued=0, token_usage=0.0))
        await settle(pilot)
        drawn: list[str] = []
        for widget, name in ((row.sparkline, "Sparkline"), (row.line, "Static")):
            render = widget.render
            widget.render = lambda render=render, name=name: drawn.append(name) or render()
        for n in range(2, 6):
            source.emit(served("decode", 0.0, 61.0 + 3 * n, running=0, queued=0, token_usage=0.0))
            await settle(pilot)
        assert drawn == [], "four samples alike: nothing drawn"
        source.emit(served("decode", 812.4, 80.0, running=1, queued=0, token_usage=0.0))
        await settle(pilot)
        assert sorted(set(drawn)) == ["Sparkline", "Static"]
        assert "812 tok/s · 1 running" in screen_text(app)


async def test_a_figures_line_too_long_for_its_panel_ends_with_an_ellipsis() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(56, 40)) as pilot:
        await settle(pilot)
        source.emit(served("decode", 812.4, 61.0, running=12, queued=0, token_usage=0.012, ttft_p50=0.084))
        await settle(pilot)
        line = next(row for row in screen_text(app).splitlines() if "tok/s" in row)
        assert line.rstrip().endswith("…") and "812 tok/s · 12 running" in line


async def test_without_metrics_the_batch_lines_figures_say_which_flag_adds_the_rest() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(180, 50)) as pilot:
        await settle(pilot)
        source.emit(ServingFigures("decode", "log", Figures(812.4, None, 12, 0, 0.01), "TTFT needs --enable-metrics", 61.0))
        await settle(pilot)
        assert "812 tok/s · 12 running · 0 queued · KV 1% · TTFT needs --enable-metrics" in screen_text(app)


async def test_only_the_panels_on_screen_have_their_figures_fetched() -> None:
    app, source = make_app(ready_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        assert source.shown[-1] == ["decode", "prefill", "router"]
        app.deployment.panels["decode"].log_view.focus()
        await pilot.press("z")
        await settle(pilot)
        assert source.shown[-1] == ["decode"]
        await pilot.press("z")
        await settle(pilot)
        assert source.shown[-1] == ["decode", "prefill", "router"]
        await pilot.press("a")
        await settle(pilot)
        assert source.shown[-1] == []
        await pilot.press("a")
        await settle(pilot)
        assert source.shown[-1] == ["decode", "prefill", "router"]
