"""Reading Slurm's output (pdtui/targets/slurm/parse.py) and the argv pdtui runs (pdtui/targets/slurm/commands.py), from text
as Slurm 22.05 prints it; tests/integration/test_slurm_commands.py reads the same from a real cluster."""

from __future__ import annotations

import base64
import stat
import subprocess
from pathlib import Path

import pytest

from pdtui.targets.slurm.commands import SlurmCommands, follow
from pdtui.targets.slurm.parse import (
    JobRow,
    accounting_off,
    ended_words,
    exit_words,
    first_host,
    gres_indices,
    hostnames,
    index_list,
    key_values,
    parse_elapsed,
    parse_job,
    parse_node,
    parse_sacct,
    parse_squeue,
    parse_submitted,
)

SHOW_JOB = """\
JobId=12 JobName=dsv4-prefill
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:00:01 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-12-01T18:13:31 EligibleTime=2026-12-01T18:13:31
   StartTime=2026-12-01T18:13:32 EndTime=Unknown Deadline=N/A
   Partition=gpu AllocNode:Sid=localhost:6190
   NodeList=vm
   BatchHost=vm
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,mem=1M,node=1,billing=1
   JOB_GRES=gpu:4
     Nodes=vm CPU_IDs=0 Mem=1 GRES=gpu:4(IDX:0-3)
   Command=/shared/pdtui jobs/dsv4-prefill.sbatch
   StdOut=/shared/pdtui/dsv4-prefill-12.out
   Power=
"""


def test_sbatch_parsable_gives_the_job_id() -> None:
    assert parse_submitted("12\n") == "12"
    assert parse_submitted("13;cluster2\n") == "13"
    assert parse_submitted("") is None
    assert parse_submitted("sbatch: error: Batch job submission failed\n") is None


def test_squeue_rows_in_the_chosen_format() -> None:
    text = ("2|PENDING|Resources|||d-decode\n"
            "4|PENDING|(ReqNodeNotAvail, UnavailableNodes:vm)|||odd|name\n"
            "1|RUNNING|None|vm|2026-12-01T18:13:32|d-prefill\n"
            "7|CANCELLED by 0|None|vm|2026-12-01T18:14:00|d-router\n"
            "garbage line\n")
    rows = parse_squeue(text)
    assert [(r.job_id, r.state, r.reason, r.nodes, r.name) for r in rows] == [
        ("2", "PENDING", "Resources", "", "d-decode"),
        ("4", "PENDING", "ReqNodeNotAvail, UnavailableNodes:vm", "", "odd|name"),
        ("1", "RUNNING", "", "vm", "d-prefill"),
        ("7", "CANCELLED", "", "vm", "d-router"),
    ]
    assert [(r.queued, r.running, r.ended) for r in rows] == [
        (True, False, False), (True, False, False), (False, True, False), (False, False, True)]


def test_a_state_slurm_adds_later_counts_as_ended() -> None:
    assert parse_squeue("3|WHATEVER_NEW|None|vm||x\n")[0].ended


def test_sacct_allocations_without_steps() -> None:
    text = ("12|OUT_OF_MEMORY|0:125|None|vm|2026-12-01T18:13:32|d-decode\n"
            "12.batch|OUT_OF_MEMORY|0:125||vm|2026-12-01T18:13:32|batch\n"
            "13|CANCELLED by 1000|0:15|None|vm|2026-12-01T18:20:00|d-decode\n"
            "14|PENDING|0:0|Priority|None assigned|Unknown|d-router\n")
    rows = parse_sacct(text)
    assert [(r.job_id, r.state, r.exit_code, r.reason, r.nodes, r.start) for r in rows] == [
        ("12", "OUT_OF_MEMORY", "0:125", "", "vm", "2026-12-01T18:13:32"),
        ("13", "CANCELLED", "0:15", "", "vm", "2026-12-01T18:20:00"),
        ("14", "PENDING", "0:0", "Priority", "", ""),
    ]


def test_sacct_on_a_cluster_without_accounting() -> None:
    assert accounting_off("Slurm accounting storage is disabled\n")
    assert not accounting_off("sacct: error: slurmdbd: Connection refused\n")


def test_scontrol_show_job_gives_the_node_and_the_gpus() -> None:
    job = parse_job(SHOW_JOB)
    assert job is not None
    assert (job.job_id, job.name, job.state, job.reason, job.exit_code) == ("12", "dsv4-prefill", "RUNNING", "", "0:0")
    assert (job.nodes, job.batch_host, job.start) == ("vm", "vm", "2026-12-01T18:13:32")
    assert job.gpus == {"vm": (0, 1, 2, 3)} and job.gpu_indices == (0, 1, 2, 3)
    assert job.fields["TRES"] == "cpu=1,mem=1M,node=1,billing=1"
    assert job.fields["Command"] == "/shared/pdtui jobs/dsv4-prefill.sbatch"   # a value with a space
    assert job.fields["Power"] == ""


def test_scontrol_of_a_multi_node_job_lists_each_node_set() -> None:
    text = ("JobId=30 JobName=big\n   JobState=RUNNING Reason=None\n   NodeList=gpu[01-02]\n   BatchHost=gpu01\n"
            "     Nodes=gpu01 CPU_IDs=0-7 Mem=0 GRES=gpu:h100:8(IDX:0-7)\n"
            "     Nodes=gpu02 CPU_IDs=0-7 Mem=0 GRES=gpu:h100:4(IDX:0,2,4,6)\n")
    job = parse_job(text)
    assert job is not None and job.gpus == {"gpu01": tuple(range(8)), "gpu02": (0, 2, 4, 6)}
    assert job.gpu_indices == tuple(range(8))
    assert job.node_gpus() == (("gpu01", tuple(range(8))), ("gpu02", (0, 2, 4, 6)))


def test_each_node_of_a_node_set_gets_its_gpus_in_the_node_lists_order() -> None:
    text = ("JobId=31 JobName=wide\n   JobState=RUNNING Reason=None\n   NodeList=gpu[01-03]\n   BatchHost=gpu01\n"
            "     Nodes=gpu[01-02] CPU_IDs=0-7 Mem=0 GRES=gpu:8(IDX:0-7)\n"
            "     Nodes=gpu03 CPU_IDs=0-3 Mem=0 GRES=gpu:4(IDX:4-7)\n")
    job = parse_job(text)
    assert job is not None
    assert job.node_gpus() == (("gpu01", tuple(range(8))), ("gpu02", tuple(range(8))), ("gpu03", (4, 5, 6, 7)))


def test_scontrol_of_an_unknown_job() -> None:
    assert parse_job("slurm_load_jobs error: Invalid job id specified\n") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("gpu:4(IDX:0-3)", (0, 1, 2, 3)), ("gpu:a100:2(IDX:0,2)", (0, 2)), ("gpu:2(IDX:1,3-4)", (1, 3, 4)),
    ("gpu:0(IDX:N/A)", ()), ("", ()), ("mps:100(0/100,0/100)", ())])
def test_gres_indices(text: str, expected: tuple[int, ...]) -> None:
    assert gres_indices(text) == expected


def test_index_list_refuses_what_is_not_one() -> None:
    assert index_list("0-3,6") == [0, 1, 2, 3, 6]
    assert index_list("N/A") == []


def test_key_values_keep_equals_inside_values() -> None:
    assert key_values("   TRES=cpu=1,node=1 Socks/Node=* AllocNode:Sid=h:1") == [
        ("TRES", "cpu=1,node=1"), ("Socks/Node", "*"), ("AllocNode:Sid", "h:1")]


def test_scontrol_show_node() -> None:
    fields = parse_node("NodeName=vm Arch=x86_64 CoresPerSocket=1\n   NodeAddr=127.0.0.1 NodeHostName=vm Version=22.05.8\n"
                        "   State=MIXED ThreadsPerCore=1\n")
    assert (fields["NodeAddr"], fields["NodeHostName"], fields["State"]) == ("127.0.0.1", "vm", "MIXED")


@pytest.mark.parametrize(("hostlist", "first"), [
    ("vm", "vm"), ("gpu[03-05,07]", "gpu03"), ("a,b", "a"), ("rack1-n[9-10]-ib", "rack1-n9-ib"), ("", "")])
def test_first_host(hostlist: str, first: str) -> None:
    assert first_host(hostlist) == first


def test_commands_put_the_wrappers_first() -> None:
    commands = SlurmCommands(squeue=("env", "SLURM_CONF=/x/slurm.conf", "squeue"))
    assert commands.queue(["a", "b"]) == ["env", "SLURM_CONF=/x/slurm.conf", "squeue", "--me", "--noheader",
                                          "--states=all", "--name=a,b", "--format=%i|%T|%r|%N|%S|%j"]
    assert commands.cancel_named("d-prefill") == ["scancel", "--me", "--name=d-prefill"]
    assert commands.show_job("3") == ["scontrol", "show", "job", "-d", "3"]
    assert follow("/o/x-3.out") == ["tail", "-F", "--sleep-interval=0.2", "-n", "+1", "/o/x-3.out"]
    assert follow("/o/x-3.out", 41)[-2:] == ["+41", "/o/x-3.out"]


def submitted(folder: Path, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The fixed sh script, run here with `echo` as sbatch, the job script on its stdin."""
    submission = SlurmCommands(sbatch=("echo",)).submit(str(folder), str(folder / "x.sbatch"), script)
    return subprocess.run(submission.argv, input=submission.input.decode(), capture_output=True, text=True,
                          check=check)


def test_submit_writes_the_script_byte_for_byte_then_runs_sbatch(tmp_path: Path) -> None:
    """The file holds the script exactly (quotes, $, newlines), private to its user (it may hold secrets)."""
    script = "#!/bin/bash\n#SBATCH --job-name=x\necho \"$HOME\" 'it''s' `date`\nexport HF_TOKEN='hf_s3cret'\n"
    folder = tmp_path / "out dir"
    result = submitted(folder, script)
    assert (folder / "x.sbatch").read_text() == script
    assert result.stdout.strip() == f"--parsable {folder / 'x.sbatch'}"
    assert stat.S_IMODE((folder / "x.sbatch").stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700        # made by pdtui: its user's alone
    assert sorted(p.name for p in folder.iterdir()) == ["x.sbatch"]     # no temporary file left


def test_the_script_never_goes_on_a_command_line(tmp_path: Path) -> None:
    script = "#!/bin/bash\nexport HF_TOKEN='hf_s3cret'\n"
    argv = SlurmCommands().submit(str(tmp_path), str(tmp_path / "x.sbatch"), script).argv
    assert not any("hf_s3cret" in word or base64.b64encode(script.encode()).decode() in word for word in argv)


def test_links_planted_in_the_shared_folder_are_never_followed(tmp_path: Path) -> None:
    """Another user's symlinks at the old temporary name and at the script's name: the files they point at are
    untouched, and the script is a file of its own at its name."""
    folder, victim = tmp_path / "shared", tmp_path / "victim"
    folder.mkdir()
    victim.write_text("the victim's own\n")
    victim.chmod(0o600)
    (folder / "x.sbatch.tmp").symlink_to(victim)
    (folder / "x.sbatch").symlink_to(victim)
    submitted(folder, "#!/bin/bash\ntrue\n")
    assert victim.read_text() == "the victim's own\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (folder / "x.sbatch").is_symlink() and (folder / "x.sbatch").read_text() == "#!/bin/bash\ntrue\n"


def test_a_folder_at_the_scripts_name_fails_the_submit_and_nothing_is_moved_into_it(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    (folder / "x.sbatch").mkdir(parents=True)
    result = submitted(folder, "#!/bin/bash\ntrue\n", check=False)
    assert result.returncode != 0 and "--parsable" not in result.stdout
    assert list((folder / "x.sbatch").iterdir()) == [] and sorted(p.name for p in folder.iterdir()) == ["x.sbatch"]


def test_a_folder_every_user_may_write_is_refused_before_anything_is_written_or_submitted(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    result = submitted(folder, "#!/bin/bash\ntrue\n", check=False)
    assert result.returncode == 77 and "--parsable" not in result.stdout and list(folder.iterdir()) == []
    assert result.stderr == f"pdtui: {folder} can be written by every user: another could make a job's output " \
                            "file before the job and read or forge it; give output_dir a folder only you (or your " \
                            "group) can write\n"
    folder.chmod(0o2770)        # a group's shared folder
    assert submitted(folder, "#!/bin/bash\ntrue\n").stdout.startswith("--parsable")


@pytest.mark.parametrize(("text", "seconds"), [
    ("00:07", 7.0), ("01:02:03", 3723.0), ("2-00:00:01", 172801.0), ("UNLIMITED", None), ("", None), ("1-2", None)])
def test_elapsed_as_slurm_prints_it(text: str, seconds: float | None) -> None:
    assert parse_elapsed(text) == seconds


def test_exit_codes_in_words() -> None:
    assert [exit_words(c) for c in ("1:0", "0:9", "0:0", "", "137:9")] == [
        "exit code 1", "killed by signal 9", "", "", "killed by signal 9"]


@pytest.mark.parametrize(("state", "reason", "code", "words"), [
    ("FAILED", "NonZeroExitCode", "1:0", "job 7 FAILED (NonZeroExitCode), exit code 1"),
    ("OUT_OF_MEMORY", "OutOfMemory", "0:125", "job 7 OUT_OF_MEMORY (OutOfMemory), killed by signal 125"),
    ("TIMEOUT", "TimeLimit", "0:15", "job 7 TIMEOUT (TimeLimit), killed by signal 15"),
    ("NODE_FAIL", "NodeDown", "0:0", "job 7 NODE_FAIL (NodeDown)"),
    ("CANCELLED", "", "0:15", "job 7 CANCELLED, killed by signal 15"),
])
def test_how_a_job_ended_in_slurms_words(state: str, reason: str, code: str, words: str) -> None:
    assert ended_words(JobRow("7", state, reason, "gpu01", "", "x"), code) == words


@pytest.mark.parametrize(("hostlist", "names"), [
    ("gpu[03-05,07],login", ["gpu03", "gpu04", "gpu05", "gpu07", "login"]),
    ("node[1-2]", ["node1", "node2"]),
    ("a,b", ["a", "b"]),
    ("n1", ["n1"]),
    ("gpu[08-10]x", ["gpu08x", "gpu09x", "gpu10x"]),
])
def test_a_hostlist_is_every_node_in_order_as_scontrol_show_hostnames(hostlist, names):
    """A job over several nodes runs rank R on its R-th node: a failure's rank names its node."""
    assert hostnames(hostlist) == names
