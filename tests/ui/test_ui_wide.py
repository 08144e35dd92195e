"""A server over several nodes on screen: one panel, a row per node, one log labelled by node, the rank to blame."""

from __future__ import annotations

from ui_fakes import log_lines, make_app, screen_text, settle

from pdtui.engine.events import StateChanged
from pdtui.engine.states import ServiceState as S
from pdtui.gpus.inventory import GpuInfo
from pdtui.gpus.sampler import GpuSample
from pdtui.sim.scripted import wide_failed_script, wide_stalled_script
from pdtui.ui.screens import QuitScreen


async def test_a_server_over_two_nodes_is_one_panel_with_a_row_per_node() -> None:
    app, _ = make_app(wide_stalled_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        screen = app.deployment
        assert list(screen.panels) == ["prefill", "decode", "router"]      # no panel of its own for decode@1
        text = screen_text(app)
        assert "2 nodes · :30002" in text
        rows = [line for line in text.splitlines() if "rank 0 gpu-a" in line or "rank 1 gpu-b" in line]
        assert len(rows) == 2
        assert "GPU 0-7" in rows[0] and "weights 3:55" in rows[0]           # rank 0 loads its weights
        assert "◐ waiting 4:04" in rows[1] and "dist 4:02" in rows[1] and "no line for 4m" in rows[1]


async def test_a_wide_servers_log_labels_each_line_with_its_node() -> None:
    app, _ = make_app(wide_stalled_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        drawn = log_lines(app.deployment.panels["decode"].log_view)
        assert any(line.startswith("gpu-b │ [09:06:03 TP8] Init parallel begin.") for line in drawn)
        assert any(line.startswith("gpu-a │ [09:06:04 TP0] Init parallel ends.") for line in drawn)
        stall = "decode: rank 1 on gpu-b: no line for 4m in distributed init"
        assert any(line.startswith(f"gpu-b │ · {stall}") for line in drawn)    # the rank's warning on its own node
        assert any(notice.startswith(stall) for notice in app.notices)


async def test_the_rank_blamed_speaks_for_its_failed_server() -> None:
    app, source = make_app(wide_failed_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        panel = app.deployment.panels["decode"]
        assert panel.has_class("-failed")
        text = screen_text(app)
        # rank 0's gloo line came first, but rank 1 ran out of memory: the engine blamed rank 1
        assert "✗ rank 1 on gpu-b: [09:06:38 TP8] Exception: Capture cuda graph failed: CUD" in text
        await pilot.press("tab", "r")       # retry from the server's panel: the engine restarts every rank
        await settle(pilot)
        assert source.retries == ["decode"]


async def test_a_server_whose_ranks_are_not_all_ready_is_not_ready() -> None:
    app, source = make_app(wide_stalled_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        source.emit(StateChanged("decode", S.WAITING, S.READY, "ready", None, 250.0, 248.0))
        await settle(pilot)
        panel = app.deployment.panels["decode"]
        assert panel.has_class("-waiting") and not panel.has_class("-ready")
        source.emit(StateChanged("decode@1", S.WAITING, S.READY, "ready", None, 251.0, 249.0))
        await settle(pilot)
        assert panel.has_class("-ready")
        assert "✓ READY 4:08" in screen_text(app)


async def test_each_nodes_gpus_are_gauged_on_its_own_row() -> None:
    app, source = make_app(wide_stalled_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        source.emit(GpuSample("gpu-b", tuple(GpuInfo(i, "H200", 40960, 143360, 0, 0) for i in range(8)), 246.0))
        await settle(pilot)
        rows = [line for line in screen_text(app).splitlines() if "rank 1 gpu-b" in line or "rank 0 gpu-a" in line]
        assert "0:40G" in rows[1] and "7:40G" in rows[1]
        assert "0:40G" not in rows[0] and "GPU 0-7" in rows[0]


async def test_the_log_of_every_service_tags_a_ranks_lines_with_its_service() -> None:
    app, _ = make_app(wide_failed_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        merged = app.deployment.merged
        assert merged is not None
        tags = {row.tag for row in merged.log_view.rows()}
        assert {"decode", "decode@1", "prefill"} <= tags


async def test_quitting_names_each_ranks_unit_with_its_host() -> None:
    app, _ = make_app(wide_stalled_script())
    async with app.run_test(size=(160, 50)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)
        assert app.deployment.actions.left_running() == ["sglang-dsv4-prefill", "sglang-dsv4-decode on gpu-a",
                                                         "sglang-dsv4-decode on gpu-b"]
