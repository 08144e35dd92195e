"""The nvidia-smi stand-in speaks like the real one: query forms, loop mode, topo -m, the sandbox wrapper."""

import os
import signal
import subprocess

import pytest

from pdtui.gpus.nvidia_smi import parse_compute_apps, parse_query_gpu, parse_topo
from pdtui.sim import nvidia_smi
from pdtui.sim.command_lines import sim_python
from pdtui.sim.systemctl import package_env
from tests.conftest_sim import Procs, read_until  # noqa: F401 - procs is a fixture


def smi(sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sandbox.commands["nvidia-smi"], *args], capture_output=True, text=True,
                          env=package_env(), timeout=30)


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    code = nvidia_smi.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_query_with_header_and_units_as_nvidia_smi_prints_it(capsys):
    code, out, _ = run_main(capsys, "--query-gpu=index,name,memory.used,utilization.gpu", "--format=csv")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 9
    assert lines[0] == "index, name, memory.used [MiB], utilization.gpu [%]"
    assert lines[1] == "0, NVIDIA H100 80GB HBM3, 1 MiB, 0 %"


def test_fields_in_any_order_and_subset(capsys):
    _, out, _ = run_main(capsys, "--query-gpu=pci.bus_id,index", "--format=csv,noheader,nounits")
    assert out.splitlines()[:2] == ["00000000:18:00.0, 0", "00000000:2A:00.0, 1"]


def test_the_inventory_query_parses_back(capsys):
    _, out, _ = run_main(capsys, "--query-gpu=index,uuid,name,pci.bus_id,memory.used,memory.total,utilization.gpu",
                         "--format=csv,noheader,nounits")
    gpus = parse_query_gpu(out)
    assert [g.index for g in gpus] == list(range(8))
    assert all(g.uuid.startswith("GPU-") and len(g.uuid) == 40 for g in gpus)
    assert len({g.uuid for g in gpus}) == 8 and gpus[0].memory_total_mib == 81559


@pytest.mark.parametrize("args, message", [
    (["--query-gpu=index,fan.speedz", "--format=csv"], 'Field "fan.speedz" is not a valid field to query.'),
    (["--query-gpu=index"], '"--format" must be csv'),
    (["--bogus"], "unrecognized arguments"),
    (["topo", "-x"], "Invalid combination of input arguments"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, args, message):
    code, out, err = run_main(capsys, *args)
    assert (code, out) == (2, "") and message in err and len(err.splitlines()) == 1


def test_topo_shows_nvlink_and_two_numa_nodes(capsys):
    _, out, _ = run_main(capsys, "topo", "-m")
    assert "\tNV18\t" in out and "NUMA Affinity" in out
    assert parse_topo(out) == {i: 0 if i < 4 else 1 for i in range(8)}


def test_injected_busy_gpus_show_in_both_queries(sandbox):
    sandbox.set_gpu_busy(3, 70000, pids=[(4242, "/usr/bin/python3", 69990)], utilization=88)
    fields = ("index", "uuid", "memory.used", "utilization.gpu")
    gpus = parse_query_gpu(smi(sandbox, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits").stdout,
                           fields)
    assert (gpus[3].memory_used_mib, gpus[3].utilization) == (70000, 88)
    apps = smi(sandbox, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv")
    assert apps.stdout.splitlines()[0] == "gpu_uuid, pid, process_name, used_gpu_memory [MiB]"
    (app,) = parse_compute_apps(apps.stdout)
    assert (app.gpu_uuid, app.pid, app.used_memory_mib) == (gpus[3].uuid, 4242, 69990)
    assert app.process_name == "/usr/bin/python3"


def test_the_sandbox_wrapper_runs_the_stand_in(sandbox):
    sandbox.set_gpu_busy(0, 5000)
    out = subprocess.run([str(sandbox.bin_dir / "nvidia-smi"), "--query-gpu=index,memory.used",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, cwd="/")
    assert out.stdout.splitlines()[0] == "0, 5000"


def loop(procs: Procs, sandbox, *extra: str) -> subprocess.Popen[str]:
    return procs.start([*sandbox.commands["nvidia-smi"], "--query-gpu=index,memory.used",
                        "--format=csv,noheader,nounits", *extra])


def test_loop_mode_prints_rounds_until_sigterm(procs, sandbox):
    proc = loop(procs, sandbox, "-lms", "20")
    lines = read_until(proc, "7, ")
    read_until(proc, "7, ", lines)
    assert lines[:9] == ["0, 1", "1, 1", "2, 1", "3, 1", "4, 1", "5, 1", "6, 1", "7, 1", "0, 1"]
    assert procs.stop(proc) == -signal.SIGTERM


def test_loop_mode_follows_state_changes(procs, sandbox):
    proc = loop(procs, sandbox, "-lms", "20")
    read_until(proc, "7, 1")
    sandbox.set_gpu_busy(7, 1234)
    read_until(proc, "7, 1234")


def test_loop_mode_exits_quietly_when_its_reader_goes(procs, sandbox):
    proc = loop(procs, sandbox, "-l", "1")
    read_until(proc, "7, ")
    proc.stdout.close()
    assert proc.wait(10) == 0
    assert proc.stderr.read() == ""


def test_wrapper_and_commands_cover_every_tool(sandbox):
    assert set(sandbox.commands) == {"systemctl", "journalctl", "nvidia-smi"}
    assert all(os.access(sandbox.bin_dir / tool, os.X_OK) for tool in sandbox.commands)
    assert sandbox.commands["nvidia-smi"][2:] == [*sim_python("pdtui.sim.nvidia_smi"), "--root", str(sandbox.root)]
