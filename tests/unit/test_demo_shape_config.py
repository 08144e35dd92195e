"""The demo's shapes: which services each generates, where they sit on the eight GPUs, their ports, and the router
in front of them all; ``--fail``'s services and the broken pair."""

from __future__ import annotations

import pytest
import yaml

from pdtui.config import Deployment, parse_config
from pdtui.servers.sglang.launch import command_line
from pdtui.sim import demo
from pdtui.sim.knobs import SHAPES

# service -> (role, GPUs, NUMA node), in config order
PLACES = {
    "1p1d": {"prefill": ("prefill", (0, 1, 2, 3), 0), "decode": ("decode", (4, 5, 6, 7), 1)},
    "1p2d": {"prefill": ("prefill", (0, 1, 2, 3), 0), "decode-0": ("decode", (4, 5), 1),
             "decode-1": ("decode", (6, 7), 1)},
    "2p2d": {"prefill-0": ("prefill", (0, 1), 0), "prefill-1": ("prefill", (2, 3), 0),
             "decode-0": ("decode", (4, 5), 1), "decode-1": ("decode", (6, 7), 1)},
}


def deployment(options: demo.DemoOptions, ports: dict[str, int] | None = None) -> Deployment:
    """The demo's config for ``options``, loaded as pdtui loads any (a host that is never reached)."""
    config = demo.config(options, ports or demo.ports_for(options), {"gpu0": {"local": True}})
    return parse_config(yaml.safe_dump(config, sort_keys=False), "demo.yaml")


def worker_args(deployment: Deployment, service: str) -> tuple[str, ...]:
    launch = deployment.services[service].launch
    assert launch is not None
    return launch.args


def test_the_sims_shapes_are_the_ones_pdtui_offers() -> None:
    assert tuple(demo.SHAPE_BACKENDS) == SHAPES == tuple(PLACES)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_places_its_backends_on_their_gpus_and_numa_nodes_with_tp_their_gpu_count(shape: str) -> None:
    made = deployment(demo.DemoOptions({}, shape=shape, reference_ports=False))
    assert list(made.services) == [*PLACES[shape], "router"]
    for name, (role, gpus, numa) in PLACES[shape].items():
        svc = made.services[name]
        assert (svc.role, svc.gpus, svc.numa, svc.unit) == (role, gpus, numa, f"sglang-dsv4-{name}.service")
        assert svc.launch is not None and svc.launch.tp == len(gpus)
        assert "--tp" in (argv := command_line(made, svc)) and argv[argv.index("--tp") + 1] == str(len(gpus))


@pytest.mark.parametrize("shape", SHAPES)
def test_every_port_is_distinct_and_each_prefill_has_a_bootstrap_port_of_its_own(shape: str) -> None:
    options = demo.DemoOptions({}, shape=shape, reference_ports=False)
    ports = demo.ports_for(options)
    assert len(set(ports.values())) == len(ports) == len(PLACES[shape]) + 2 + sum(
        role == "prefill" for role, _, _ in PLACES[shape].values())
    made = deployment(options, ports)
    prefills = [svc for svc in made.services.values() if svc.role == "prefill"]
    assert [svc.bootstrap_port for svc in prefills] == [ports[f"{svc.name}/bootstrap"] for svc in prefills]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_router_comes_after_every_backend_and_routes_to_each(shape: str) -> None:
    made = deployment(demo.DemoOptions({}, shape=shape, reference_ports=False))
    router = made.services["router"]
    assert router.after == tuple(PLACES[shape])
    argv = " ".join(command_line(made, router))
    for svc in made.services.values():
        if svc.role == "prefill":
            assert f"--prefill http://127.0.0.1:{svc.port} {svc.bootstrap_port}" in argv
        elif svc.role == "decode":
            assert f"--decode http://127.0.0.1:{svc.port}" in argv


def test_only_the_reference_shape_takes_the_reference_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "port_is_free", lambda port: True)
    reference = demo.ports_for(demo.DemoOptions({}))
    assert reference == demo.REFERENCE_PORTS
    for shape in ("1p2d", "2p2d"):
        ports = demo.ports_for(demo.DemoOptions({}, shape=shape))
        assert not set(ports.values()) & set(demo.REFERENCE_PORTS.values())


def test_a_broken_pair_decode_cannot_reach_the_first_prefills_bootstrap_port_only() -> None:
    options = demo.DemoOptions({"decode-1": "broken-pair"}, shape="2p2d", reference_ports=False)
    ports = demo.ports_for(options)
    made = deployment(options, ports)
    assert worker_args(made, "decode-1")[-2:] == ("--unreachable-bootstrap", str(ports["prefill-0/bootstrap"]))
    for other in ("prefill-0", "prefill-1", "decode-0"):
        assert "--unreachable-bootstrap" not in worker_args(made, other)
        assert "--fail" not in worker_args(made, other)


def test_a_worker_mode_goes_to_its_service_alone() -> None:
    made = deployment(demo.DemoOptions({"decode-0": "transfer-errors-later"}, shape="1p2d", reference_ports=False))
    assert worker_args(made, "decode-0")[-2:] == ("--fail", "transfer-errors-later")
    assert "--fail" not in worker_args(made, "decode-1")


def test_a_page_size_decode_runs_128_and_every_other_backend_says_64() -> None:
    made = deployment(demo.DemoOptions({"decode-1": "page-size"}, shape="2p2d", reference_ports=False))
    assert worker_args(made, "decode-1")[-2:] == ("--page-size", "128")
    for other in ("prefill-0", "prefill-1", "decode-0"):
        assert worker_args(made, other)[-2:] == ("--page-size", "64")


@pytest.mark.parametrize("text, shape, service, mode", [
    ("decode:oom", "1p1d", "decode", "oom"),
    ("decode-1:broken-pair", "2p2d", "decode-1", "broken-pair"),
    ("decode:broken-pair", "1p1d", "decode", "broken-pair"),
    ("prefill:transfer-errors-later", "1p2d", "prefill", "transfer-errors-later"),
])
def test_fail_names_a_backend_of_the_shape_and_a_mode(text: str, shape: str, service: str, mode: str) -> None:
    assert demo.parse_failure(text, shape=shape) == (service, mode)


@pytest.mark.parametrize("text, shape, message", [
    ("decode:oom", "2p2d", "--fail decode:oom: the 2p2d demo has no service 'decode'; its prefills and decodes: "
                           "prefill-0, prefill-1, decode-0, decode-1"),
    ("router:oom", "1p1d", "--fail router:oom: the 1p1d demo has no service 'router'; its prefills and decodes: "
                           "prefill, decode"),
    ("prefill-0:broken-pair", "2p2d", "--fail prefill-0:broken-pair: broken-pair is a decode's (it cannot reach a "
                                      "prefill's bootstrap server); the 2p2d demo's decodes: decode-0, decode-1"),
    ("prefill:page-size", "1p1d", "--fail prefill:page-size: page-size is a decode's (it runs another page size "
                                  "than the prefills); the 1p1d demo's decodes: decode"),
])
def test_a_fail_the_shape_cannot_play_is_one_line_naming_its_services(text: str, shape: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        demo.parse_failure(text, shape=shape)
    assert str(raised.value) == message


def test_an_unknown_mode_lists_the_modes_with_the_demos_own() -> None:
    with pytest.raises(ValueError, match=r"^--fail expects SERVICE:MODE with SERVICE one of prefill, decode-0, "
                                         r"decode-1 and MODE one of oom, .*, broken-pair, page-size, got 'decode-0:meltdown'$"):
        demo.parse_failure("decode-0:meltdown", shape="1p2d")


def test_a_demo_of_another_shape_is_never_handed_a_reference_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared port counter walks through 30000 too: a demo not taking the reference ports skips them."""
    handed = iter(range(29995, 29995 + 100))
    monkeypatch.setattr(demo, "free_port", lambda: next(handed))
    monkeypatch.setattr(demo, "port_is_free", lambda port: True)
    ports = demo.ports_for(demo.DemoOptions({}, shape="1p2d"))
    assert not set(ports.values()) & set(demo.REFERENCE_PORTS.values()), ports
    assert 29999 in ports.values() and 30003 in ports.values(), "the ports around them are still handed out"
