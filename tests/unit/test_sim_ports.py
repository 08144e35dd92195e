"""Ports chosen at run time: each one handed out once per process."""

from pdtui.sim.ports import free_port


def test_ports_asked_for_in_a_row_are_all_different():
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
