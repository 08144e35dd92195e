"""Which ports the demo takes: the reference deployment's where free, or (PDTUI_DEMO_PORTS=any) the OS's."""

from __future__ import annotations

import pytest

from pdtui.sim import demo


def test_the_reference_ports_by_default_and_the_oss_when_asked() -> None:
    assert demo.reference_ports_wanted({}) is True
    assert demo.reference_ports_wanted({"PDTUI_DEMO_PORTS": "reference"}) is True
    assert demo.reference_ports_wanted({"PDTUI_DEMO_PORTS": "any"}) is False


def test_another_value_is_one_line_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="PDTUI_DEMO_PORTS expects reference or any, got 'random'"):
        demo.reference_ports_wanted({"PDTUI_DEMO_PORTS": "random"})
