from pdtui.engine.events import ProbeResult
from pdtui.sim.scripted import PREFILL
from pdtui.ui.format import check_summary
from pdtui.ui.model import ServiceView


def probe(check, ok, detail="", latency=None):
    return ProbeResult("router", check, ok, detail, latency)


def test_summary_shows_latency_of_passing_checks_and_why_others_wait():
    line = check_summary([probe("tcp", True, "port 30001 accepting", 0.0012),
                          probe("readiness", False, "HTTP 503: {\"status\":\"not ready\"}", 0.002)])
    assert line == '✓ tcp 1 ms · ○ readiness: HTTP 503: {"status":"not ready"}'


def test_summary_shows_the_smoke_answer():
    line = check_summary([probe("smoke", True, "answer 'OK' in 45 ms", 0.045)])
    assert line == "✓ smoke: answer 'OK' in 45 ms"


def test_summary_detail_is_inert():
    assert "\x1b" not in check_summary([probe("http /health", False, "HTTP 500: \x1b]52;c;x\x07")])


def test_view_keeps_the_latest_result_per_check():
    view = ServiceView(PREFILL)
    view.apply_probe(probe("http /health", False, "HTTP 503"))
    view.apply_probe(probe("http /health", True, "HTTP 200", 0.003))
    assert [c.ok for c in view.checks.values()] == [True]
