"""``pdtui demo --web`` in a real browser (Debian's headless Chromium): the page shows the three panels READY,
fetches nothing but from the server (its policy blocking nothing), refuses actions without the token, takes the token
out of the address bar, saves a log as a download with it, and every process ends with the server.

The screen is read from the page's xterm.js buffer (what its canvas renderer
draws; see tests/browser.py). ``PDTUI_WEB_SCREENSHOT=docs/web.png`` also saves
the screenshot the README shows.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time

import pytest

from tests.browser import Chromium, Page, chromium
from tests.conftest_sim import assert_nothing_left, gone, wait_until
from tests.integration.test_web_cli import DEMO, sessions_of
from tests.web_helpers import Served

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (Debian: apt-get install chromium; "
                                                             "scripts/test installs it when run as root)")
WAIT = 60.0


def ready_panels(rows: list[str]) -> bool:
    """The TUI watching, with its three panels' badges READY."""
    screen = "\n".join(rows)
    return "watching" in rows[0] and screen.count("✓ READY") == 3


async def rows_until(page: Page, check, timeout: float = WAIT) -> list[str]:
    """The terminal's rows once ``check(rows)``; fail with the screen it shows otherwise."""
    deadline = time.monotonic() + timeout
    rows: list[str] = []
    while time.monotonic() < deadline:
        rows = await page.terminal_rows() or []
        if rows and check(rows):
            return rows
        await asyncio.sleep(0.2)
    pytest.fail("the page never showed what was awaited; it showed:\n" + "\n".join(rows))


async def until(check, timeout: float = WAIT) -> None:
    """Wait until ``check()``, the loop running; fail the test if it never is."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{check} never held")
        await asyncio.sleep(0.2)


async def focus(page: Page) -> None:
    """Focus the terminal, as clicking into it does (its input element)."""
    await page.evaluate("document.querySelector('.xterm-helper-textarea').focus()")


async def type_keys(page: Page, keys: str) -> None:
    """Keys into the terminal, as typing into it: the terminal focused, the text inserted."""
    await focus(page)
    await page.send("Input.insertText", {"text": keys})


async def test_demo_web_in_chromium_shows_three_ready_refuses_without_the_token_and_leaves_nothing(tmp_path):
    sandbox = tmp_path / "sim"
    downloads = tmp_path / "downloads"
    with Served([*DEMO, "--allow-actions"], tmp_path, sandbox) as served:
        async with Chromium(tmp_path / "chromium" / "profile") as browser:
            await browser.download_to(downloads)
            watching = await browser.open(served.url.split("?")[0])
            rows = await rows_until(watching, ready_panels)
            to_ready = time.monotonic() - served.started_at
            print(f"\nserver start to three READY in the browser: {to_ready:.1f}s")
            await focus(watching)                            # a focused page: the footer shows the keys
            await rows_until(watching, lambda rs: "q quit" in rs[-1], timeout=15)
            await watching.screenshot(tmp_path / "web.png")
            if target := os.environ.get("PDTUI_WEB_SCREENSHOT"):
                shutil.copy(tmp_path / "web.png", target)
            assert any("prefill" in row and "✓ READY" in row for row in rows)
            assert any("router" in row and "✓ READY" in row for row in rows)
            await type_keys(watching, "R")
            await rows_until(watching, lambda rs: any("restart refused" in row for row in rs), timeout=15)
            await type_keys(watching, "s")
            await rows_until(watching, lambda rs: any("saving a log refused" in row for row in rs), timeout=15)
            assert await watching.evaluate("window.violations") == []     # the page's policy blocks nothing it needs

            acting = await browser.open(served.url)
            await rows_until(acting, ready_panels)
            assert await acting.evaluate("location.href") == f"http://127.0.0.1:{served.port}/"   # the token left it
            await type_keys(acting, "R")
            await rows_until(acting, lambda rs: any("Restart prefill (sglang-dsv4-prefill" in r for r in rs), timeout=15)
            await type_keys(acting, "n")                     # asked, not done
            await type_keys(acting, "s")                     # a download, nothing written where the server runs
            saved = downloads / "pdtui-dsv4-flash-pd_demo-prefill.log"
            await until(saved.exists)
            assert "prefill" in saved.read_text() and list(served.cwd.iterdir()) == []

            origin = f"http://127.0.0.1:{served.port}/"
            assert browser.requests and all(url.startswith(origin) for url in browser.requests), browser.requests

            sessions = sessions_of(sandbox)
            assert len(sessions) == 2
            await watching.close()                           # closing a tab ends its session's process
            wait_until(lambda: len([s for s in sessions if s.alive()]) == 1, timeout=20)
            code = served.stop(signal.SIGINT)
            chromium_pid = browser.proc.pid if browser.proc else 0
        err = served.stderr()
    assert code == 0, err
    assert "2 sessions ended" in err and "Traceback" not in err
    assert not any(proc.alive() for proc in sessions) and gone(served.pid) and gone(chromium_pid)
    assert_nothing_left(sandbox)

