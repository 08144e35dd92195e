"""A service's job script (pdtui/targets/slurm/script.py): its #SBATCH lines from the job block, the command line its unit
would run, one output file per job."""

from __future__ import annotations

import shlex

import pytest

from pdtui.commands import units_command as units
from pdtui.config import ConfigError, parse_config
from pdtui.servers.sglang.launch import command_line
from pdtui.targets.registry import Registry
from pdtui.targets.slurm.script import output_path, render_script, sbatch_options, slurm_time
from tests.unit.test_config import SLURM


def test_the_script_runs_the_command_line_its_unit_would_run() -> None:
    dep = parse_config(SLURM, "/cfg/pd.yaml")
    script = render_script(dep, dep.services["prefill"])
    lines = script.text.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert lines[-1] == "exec " + shlex.join(command_line(dep, dep.services["prefill"]))
    assert "--tp 4 --host 0.0.0.0 --port 30000 --disaggregation-mode prefill" in lines[-1]
    assert "CUDA_VISIBLE_DEVICES" not in script.text          # Slurm gives the GPUs
    assert (script.name, script.path, script.output("12")) == (
        "dsv4-pd-prefill", "/shared/pdtui/dsv4-pd-prefill.sbatch", "/shared/pdtui/dsv4-pd-prefill-12.out")


def test_sbatch_lines_from_the_job_block_and_the_clusters_defaults() -> None:
    dep = parse_config(SLURM)
    lines = [line for line in render_script(dep, dep.services["prefill"]).text.splitlines() if line.startswith("#SBATCH")]
    assert lines == ["#SBATCH --job-name=dsv4-pd-prefill", "#SBATCH --output=/shared/pdtui/%x-%j.out",
                     "#SBATCH --partition=gpu", "#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:4",
                     "#SBATCH --mem=200G", "#SBATCH --time=0-02:00:00", "#SBATCH --mail-type=FAIL"]


def test_every_job_key_becomes_its_option() -> None:
    text = SLURM.replace("job: {gpus_per_node: 4, time: 2h, queue_timeout: 20m, mem: 200G, args: [--mail-type=FAIL]}",
                         "job: {gpus_per_node: 8, gpu_type: h100, partition: big, account: ml, qos: high, "
                         "reservation: r1, constraint: ib, cpus_per_task: 16, exclusive: true, time: 90}")
    dep = parse_config(text)
    svc = dep.services["prefill"]
    assert svc.job is not None
    assert sbatch_options(dep.clusters["hpc"], svc.job) == [
        "--job-name=dsv4-pd-prefill", "--output=/shared/pdtui/%x-%j.out", "--partition=big", "--account=ml",
        "--qos=high", "--reservation=r1", "--constraint=ib", "--nodes=1", "--ntasks-per-node=1", "--gres=gpu:h100:8",
        "--cpus-per-task=16", "--time=0-00:01:30", "--exclusive"]


def test_env_and_setup_come_before_the_command() -> None:
    text = SLURM.replace("job: {gpus_per_node: 4, time: 2h, queue_timeout: 20m, mem: 200G, args: [--mail-type=FAIL]}\n"
                         "    launch: {model: m}",
                         "job: {gpus_per_node: 4, setup: [module load cuda]}\n"
                         "    launch: {model: m, env: {NCCL_DEBUG: INFO, ODD: \"a b'c\"}}")
    dep = parse_config(text)
    lines = render_script(dep, dep.services["prefill"]).text.splitlines()
    start = lines.index("export NCCL_DEBUG=INFO")
    assert lines[start:start + 3] == ["export NCCL_DEBUG=INFO", "export ODD='a b'\"'\"'c'", "module load cuda"]
    assert lines[start + 3].startswith("exec ")


def test_a_router_job_routes_to_the_nodes_its_backends_run_on() -> None:
    dep = parse_config(SLURM)
    urls = {"prefill": "http://gpu01:30000", "decode": "http://gpu07:30002"}
    last = render_script(dep, dep.services["router"], urls).text.splitlines()[-1]
    assert "--prefill http://gpu01:30000 8998 --decode http://gpu07:30002 --host 0.0.0.0 --port 30001" in last
    assert last.startswith("exec /usr/bin/python3 -m smg.launch_router --pd-disaggregation")


def test_a_job_on_two_nodes_runs_the_server_once_per_node_with_its_rank() -> None:
    dep = parse_config(SLURM)
    lines = render_script(dep, dep.services["decode"]).text.splitlines()
    assert "#SBATCH --nodes=2" in lines and "--tp 8" in lines[-1]
    assert lines[-3] == 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    assert lines[-2] == 'head_addr=$(scontrol show node -o "$head" | grep -o "NodeAddr=[^ ]*" | cut -d= -f2)'
    words = shlex.split(lines[-1])
    assert words[:7] == ["exec", "srun", "--nodes=$SLURM_JOB_NUM_NODES", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                         "--label", "bash"]
    assert words[8] == 'exec "$@" --nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" --dist-init-addr "$0"'
    assert words[9] == "${head_addr:-$head}:50000" and words[10:] == command_line(dep, dep.services["decode"])


def test_time_limits_as_sbatch_takes_them() -> None:
    assert [slurm_time(s) for s in (90, 3600, 86400 * 2 + 61, 0.5)] == ["0-00:01:30", "0-01:00:00", "2-00:01:01", "0-00:00:01"]
    assert output_path("/o", "%x", "%j") == "/o/%x-%j.out"


def test_pdtui_units_prints_each_jobs_script_its_router_naming_the_nodes_to_come(capsys) -> None:
    assert units.run(parse_config(SLURM, "pd.yaml")) == 0
    out = capsys.readouterr().out
    assert "# ---- dsv4-pd-prefill.sbatch on hpc " in out and "# ---- my-decode.sbatch on hpc " in out
    assert "--prefill 'http://<node of prefill>:30000' 8998 --decode 'http://<node of decode>:30002'" in out


def test_pdtui_units_has_nothing_to_compare_for_jobs(capsys) -> None:
    assert units.run(parse_config(SLURM, "pd.yaml"), diff_them=True) == 1
    assert capsys.readouterr().err == ("pdtui: the services of pd.yaml run as Slurm jobs: no unit to compare or install "
                                       "(pdtui units CONFIG prints their job scripts)\n")


def test_an_output_dir_with_blanks_and_a_hash_is_one_quoted_word_as_sbatch_reads_it() -> None:
    dep = parse_config(SLURM.replace("output_dir: /shared/pdtui/", "output_dir: '/shared/pd jobs/#1 \"x\"'"))
    lines = render_script(dep, dep.services["prefill"]).text.splitlines()
    assert '#SBATCH --output="/shared/pd jobs/#1 \\"x\\"/%x-%j.out"' in lines


def test_an_extra_option_with_blanks_or_a_hash_stays_one_word_as_sbatch_reads_it() -> None:
    dep = parse_config(SLURM.replace("args: [--mail-type=FAIL]", "args: ['--comment=two words #x \"q\"', --exclusive]"))
    lines = render_script(dep, dep.services["prefill"]).text.splitlines()
    assert '#SBATCH --comment="two words #x \\"q\\""' in lines and "#SBATCH --exclusive" in lines


@pytest.mark.parametrize("folder", ["/shared/%u/jobs", "/shared/a\\\\b"])
def test_an_output_dir_sbatch_would_read_as_a_pattern_is_refused_at_load(folder: str) -> None:
    with pytest.raises(ConfigError, match=r"^pd\.yaml:6:17: expected a folder without '%' or '\\'"):
        parse_config(SLURM.replace("output_dir: /shared/pdtui/", f'output_dir: "{folder}"'), "pd.yaml")


def test_the_restart_hint_quotes_the_scripts_path() -> None:
    dep = parse_config(SLURM.replace("output_dir: /shared/pdtui/", "output_dir: '/shared/pd jobs'"))
    run = Registry(host_factory=lambda *a, **k: None).new_run(dep.services["prefill"])   # type: ignore[arg-type, return-value]
    assert run.info(dep).restart_command.endswith("; sbatch '/shared/pd jobs/dsv4-pd-prefill.sbatch'")
