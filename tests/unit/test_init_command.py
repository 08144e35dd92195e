"""pdtui init as a command, on a scripted host: never over a file, what it asks systemctl, what it prints."""

import io
from collections.abc import Callable

from pdtui import cli
from pdtui.commands.init import init, machine_name
from pdtui.commands.init.survey import survey
from pdtui.config import load_config
from pdtui.gpus.nvidia_smi import MARK
from pdtui.hosts.base import HostError, Result

COMMANDS = {"systemctl": ["systemctl"], "journalctl": ["journalctl"], "nvidia-smi": ["nvidia-smi"]}

LIST_UNITS = ("ssh.service                 loaded active   running OpenBSD Secure Shell server\n"
              "sglang-dsv4-prefill.service loaded active   running SGLang prefill\n"
              "gone.service                not-found inactive dead  gone.service\n")
LIST_UNIT_FILES = ("ssh.service enabled enabled\nsglang-dsv4-prefill.service enabled enabled\n"
                   "sglang-dsv4-decode.service disabled enabled\nsglang@.service static -\n"
                   "sglang-masked.service masked enabled\nfrontdoor.service disabled enabled\n")
FILES = {
    "ssh.service": "[Service]\nExecStart=/usr/sbin/sshd -D\n",
    "sglang-dsv4-prefill.service": "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0,1,2,3\nExecStart=/usr/bin/python3 -m "
                                   "sglang.launch_server --disaggregation-mode prefill --port 30100\n",
    "sglang-dsv4-decode.service": "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=4,5,6,7\nExecStart=/usr/bin/python3 -m "
                                  "sglang.launch_server --disaggregation-mode decode --port 30102\n",
    "frontdoor.service": "[Service]\nExecStart=/opt/venv/bin/python -m sglang_router.launch_router "
                         "--pd-disaggregation --port 8000\n",
}
SMI = "".join(f"{i}, GPU-{i}, NVIDIA H100 80GB HBM3, 00000000:{18 + i:02X}:00.0, 1, 81559, 0\n" for i in range(8))
TOPO = ("\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        + "".join(f"GPU{i}\t" + "\t".join("X" if i == j else "NV18" for j in range(8)) + f"\t0-55\t{i // 4}\t\tN/A\n"
                  for i in range(8)))


def cat(units: list[str]) -> Result:
    """``systemctl cat`` as systemd answers: the files it has, an error line (and status 1) for the rest."""
    found = [f"# /etc/systemd/system/{u}\n{FILES[u]}" for u in units if u in FILES]
    missing = [f"No files found for {u}." for u in units if u not in FILES]
    return Result(("systemctl", "cat"), 1 if missing else 0, "\n".join(found), "\n".join(missing))


class ScriptedHost:
    """A host answering systemctl and nvidia-smi from the tables above; ``broken`` tools cannot be run."""

    def __init__(self, name: str = "gpu0", broken: tuple[str, ...] = (),
                 answers: dict[str, Callable[[list[str]], Result]] | None = None) -> None:
        self.name = name
        self.calls: list[list[str]] = []
        self.broken = broken
        self.answers = answers or {}

    async def run(self, argv, *, timeout=None, read_only=False) -> Result:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] in self.broken:
            raise HostError(f"{self.name}: cannot run {argv[0]}: No such file or directory")
        if argv[0] == "sh" and argv[3] == "pdtui-gpus":     # the inventory: sysfs hides the GPUs, as the sim's does
            status = 127 if "nvidia-smi" in self.broken else 0
            mark = argv[5] if len(argv) > 5 else MARK        # the script's $2
            out = f"{SMI if not status else ''}{mark} {status}\n{mark} {status}\n{mark} 0\n"
            return Result(tuple(argv), 0, out, "")
        verb = argv[1] if argv[0] == "systemctl" else "topo" if "topo" in argv else argv[1].partition("=")[0]
        if verb in self.answers:
            return self.answers[verb](argv)
        if verb == "cat":
            return cat([a for a in argv[2:] if not a.startswith("-")])
        ok = {"list-units": LIST_UNITS, "list-unit-files": LIST_UNIT_FILES, "--query-gpu": SMI, "topo": TOPO,
              "--query-compute-apps": ""}
        return Result(tuple(argv), 0, ok[verb], "")

    async def close(self) -> None:
        return None


async def test_the_units_come_from_both_listings_and_their_files():
    found = await survey(ScriptedHost(), COMMANDS)
    units = {u.name: (u.role, u.port, u.gpus, u.active) for u in found.units}
    assert units == {"sglang-dsv4-prefill.service": ("prefill", 30100, (0, 1, 2, 3), "active"),
                     "sglang-dsv4-decode.service": ("decode", 30102, (4, 5, 6, 7), ""),
                     "frontdoor.service": ("router", 8000, None, "")}
    assert found.inventory is not None and dict(found.inventory.numa) == {i: i // 4 for i in range(8)}


async def test_templates_masked_and_missing_units_are_not_read():
    host = ScriptedHost()
    await survey(host, COMMANDS)
    (cat_call,) = [call for call in host.calls if call[1] == "cat"]
    assert sorted(cat_call[3:]) == ["frontdoor.service", "sglang-dsv4-decode.service", "sglang-dsv4-prefill.service",
                                    "ssh.service"]


async def test_a_failing_list_units_still_leaves_the_unit_files():
    def refuse(argv):
        return Result(tuple(argv), 1, "", "Failed to connect to bus: No such file or directory")
    found = await survey(ScriptedHost(answers={"list-units": refuse}), COMMANDS)
    assert {u.name for u in found.units} == {"sglang-dsv4-prefill.service", "sglang-dsv4-decode.service",
                                             "frontdoor.service"}
    assert found.systemctl_error is None


async def test_no_systemctl_is_no_units_and_the_reason():
    found = await survey(ScriptedHost(broken=("systemctl",)), COMMANDS)
    assert found.units == () and "cannot run systemctl" in found.systemctl_error


async def test_no_nvidia_smi_is_no_inventory():
    assert (await survey(ScriptedHost(broken=("nvidia-smi",)), COMMANDS)).inventory is None


async def test_init_writes_a_config_that_loads_and_says_the_next_steps(tmp_path):
    path, out, err = tmp_path / "pdtui.yaml", io.StringIO(), io.StringIO()
    assert await init(path, ScriptedHost(), COMMANDS, out=out, err=err) == 0
    deployment = load_config(path)
    got = {name: (svc.unit, svc.gpus, svc.numa, svc.port) for name, svc in deployment.services.items()}
    assert got == {"prefill": ("sglang-dsv4-prefill.service", (0, 1, 2, 3), 0, 30100),
                   "decode": ("sglang-dsv4-decode.service", (4, 5, 6, 7), 1, 30102),
                   "router": ("frontdoor.service", (), None, 8000)}
    lines = out.getvalue().splitlines()
    assert lines[0] == f"pdtui init: wrote {path}"
    assert lines[-2].startswith(f"next: pdtui check {path} --probe") and lines[-1] == f"then: pdtui up {path}"
    assert err.getvalue() == ""


async def test_a_folder_given_gets_a_pdtui_yaml_inside(tmp_path):
    out = io.StringIO()
    assert await init(tmp_path, ScriptedHost(), COMMANDS, out=out, err=io.StringIO()) == 0
    assert load_config(tmp_path / "pdtui.yaml").hosts["gpu0"].local
    assert out.getvalue().startswith(f"pdtui init: wrote {tmp_path / 'pdtui.yaml'}\n")


async def test_an_existing_file_is_never_overwritten_and_nothing_is_asked(tmp_path):
    path, err = tmp_path / "pdtui.yaml", io.StringIO()
    path.write_text("mine\n")
    host = ScriptedHost()
    assert await init(path, host, COMMANDS, out=io.StringIO(), err=err) == 2
    assert path.read_text() == "mine\n" and host.calls == []
    assert err.getvalue() == f"pdtui init: {path} already exists; not overwriting it (move it away or give another PATH)\n"


async def test_a_dangling_symlink_counts_as_existing(tmp_path):
    path = tmp_path / "pdtui.yaml"
    path.symlink_to(tmp_path / "elsewhere.yaml")
    assert await init(path, ScriptedHost(), COMMANDS, out=io.StringIO(), err=io.StringIO()) == 2
    assert not (tmp_path / "elsewhere.yaml").exists()


async def test_a_missing_folder_is_one_line_and_exit_2(tmp_path):
    err = io.StringIO()
    assert await init(tmp_path / "no" / "pdtui.yaml", ScriptedHost(), COMMANDS, out=io.StringIO(), err=err) == 2
    assert err.getvalue().count("\n") == 1 and "no folder" in err.getvalue()


def test_the_cli_refuses_an_existing_file_in_one_line(tmp_path, capsys):
    path = tmp_path / "deploy.yaml"
    path.write_text("mine\n")
    assert cli.main(["init", str(path)]) == 2
    captured = capsys.readouterr()
    assert path.read_text() == "mine\n" and captured.out == ""
    assert captured.err.splitlines() == [f"pdtui init: {path} already exists; not overwriting it "
                                         "(move it away or give another PATH)"]


def test_the_cli_writes_pdtui_yaml_in_the_folder_by_default(tmp_path, monkeypatch, capsys):
    (tmp_path / "pdtui.yaml").write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init"]) == 2
    assert "pdtui.yaml already exists" in capsys.readouterr().err


def test_the_machine_name_is_a_valid_host_key(monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "_GPU box#7.example.com")
    assert machine_name() == "GPU-box-7"
    monkeypatch.setattr("socket.gethostname", lambda: "")
    assert machine_name() == "local"
