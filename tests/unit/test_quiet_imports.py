"""A command that uses SSH prints nothing of its libraries' own deprecations: the user can do nothing about them."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["pdtui.hosts.ssh", "pdtui.sim.sshd", "pdtui.sim.systemd_host"])
def test_importing_what_uses_ssh_writes_nothing_on_stderr(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_another_librarys_warnings_are_still_shown():
    code = "import pdtui, warnings; warnings.warn('X is deprecated and support will be removed', UserWarning)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "X is deprecated" in done.stderr
