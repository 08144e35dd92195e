"""The README a newcomer reads: the two commands first, every demo failure mode in its table."""

from __future__ import annotations

import re
from pathlib import Path

from pdtui.sim.knobs import DEMO_FAIL_MODES, FABRIC_FAIL_MODES, FAIL_MODES

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
DEMO_COMMAND = "pip install -e '.[router]' && pdtui demo"
TEST_COMMAND = "scripts/test"


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def test_the_two_commands_come_in_the_first_screenful_with_only_the_opening_before_them():
    opening = README.splitlines()[:30]
    assert DEMO_COMMAND in opening and TEST_COMMAND in opening
    assert README.index(TEST_COMMAND) < README.index("\n## ", README.index("## Try it") + 1)


def test_ci_runs_exactly_the_readmes_test_command():
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == TEST_COMMAND


def test_every_fail_mode_of_the_demo_has_a_row_in_the_failure_table():
    rows = {cell for line in _section("The demo").splitlines() if line.startswith("| `")
            for cell in re.findall(r"`(?:fabric:)?([a-z0-9-]+)`", line.split(" | ")[0])}
    assert rows >= {*FAIL_MODES, *DEMO_FAIL_MODES, *FABRIC_FAIL_MODES, "pending"}, sorted(
        {*FAIL_MODES, *DEMO_FAIL_MODES, *FABRIC_FAIL_MODES} - rows)


def test_every_section_the_contents_line_links_to_exists():
    headings = {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in README.splitlines() if line.startswith("## ") or line.startswith("### ")}
    links = re.findall(r"\]\(#([^)]+)\)", README)
    assert links and [link for link in links if link not in headings] == []
