"""A unit in the real-systemd container runs the interpreter that booted the container (pdtui/sim/systemd_host.py).

Units made by pdtui's tests and benches name ``sys.executable`` as their
ExecStart; the container sees the machine's root alone, with a /tmp of its own,
so a venv made under /tmp is not there unless the boot binds it in. Here the
python of a venv under /tmp, pdtui installed in it editable from a checkout also
under /tmp, boots a container as a bench run from that venv does, and a unit
runs that python and imports pdtui from that checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pdtui.sim import systemd_host

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0    # a boot takes about a second; a loaded machine may need far more
STOP = 30.0        # the booter powers its container off on SIGTERM (systemd_host.STOP_TIMEOUT, twice at most)

# What the unit runs: where its interpreter is, and where it imports pdtui from.
PROBE = "import sys, pdtui; print(sys.prefix); print(pdtui.__file__)"

# The booter, run by the venv's python: boots a container, runs PROBE as a unit with its own interpreter as
# ExecStart, prints what came of it, and powers the container off however it ends (SIGTERM included).
BOOTER = """
import json, signal, sys
from pathlib import Path
from pdtui.sim import systemd_host
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
host = systemd_host.boot(Path(sys.argv[1]))
try:
    ran = host.run("systemd-run", "--wait", "--pipe", "--quiet", "--unit=venv-probe", sys.executable, "-c",
                   sys.argv[2], timeout=60)
    print(json.dumps({"status": ran.returncode, "out": ran.stdout, "err": ran.stderr}))
finally:
    host.stop()
"""


@pytest.fixture
def under_tmp() -> Iterator[Path]:
    """A folder under the machine's /tmp, which the container does not share; removed at the end."""
    reason = systemd_host.missing_reason()
    if reason:
        pytest.skip(f"no real systemd: {reason}")
    folder = Path(tempfile.mkdtemp(prefix="pdtui-venv-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def editable_venv(folder: Path) -> tuple[Path, Path]:
    """A venv with pdtui installed editable from a checkout beside it, as pip's editable install leaves it: the
    checkout's path in a .pth and the PEP 610 record naming it; pdtui's dependencies come from this interpreter's
    own site-packages (this interpreter may itself run in a venv). Returns the venv and the checkout."""
    checkout, venv = folder / "checkout", folder / "venv"
    shutil.copytree(REPO / "pdtui", checkout / "pdtui", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    packages = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    dependencies = "".join(f"import site; site.addsitedir({path!r})\n" for path in site.getsitepackages())
    (packages / "_pdtui_editable.pth").write_text(f"{checkout}\n{dependencies}")
    record = packages / "pdtui-0.1.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: pdtui\nVersion: 0.1.0\n")
    (record / "direct_url.json").write_text(json.dumps({"url": checkout.as_uri(), "dir_info": {"editable": True}}))
    return venv, checkout


def boot_and_probe(folder: Path, python: Path) -> dict:
    """BOOTER run by ``python``, importing pdtui from this checkout (as a worktree beside an editable install
    does); stopped by SIGTERM, then SIGKILL, if it does not end in time."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    booter = subprocess.Popen([str(python), "-c", BOOTER, str(folder / "container"), PROBE], cwd=folder, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = booter.communicate(timeout=TIMEOUT)
    finally:
        if booter.poll() is None:
            booter.terminate()
            try:
                booter.communicate(timeout=STOP)
            except subprocess.TimeoutExpired:
                booter.kill()
                booter.communicate()
    assert booter.returncode == 0, err[-3000:]
    return json.loads(out)


def test_a_unit_runs_the_python_of_a_venv_under_tmp_that_booted_the_container(under_tmp: Path):
    venv, checkout = editable_venv(under_tmp)
    ran = boot_and_probe(under_tmp, venv / "bin" / "python")
    assert ran["status"] == 0, ran["err"]
    assert ran["out"].splitlines() == [str(venv), str(checkout / "pdtui" / "__init__.py")]
