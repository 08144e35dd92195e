"""Real SGLang on this machine's CPU: where it is installed, the flags a CPU PD pair needs, the tiny model it serves.

The tests and ``pdtui demo --real`` run the real server, not the sim's worker.
SGLang and its transfer engine live in a venv of their own (about 11 GB, with
pip's CUDA torch: nothing of the GPU is used), so pdtui's own install stays
light; ``python -m pdtui.sim.real_sglang install`` makes it, and the test
command does that when it runs as root.

What a PD pair needs on a CPU, each measured on SGLang 0.5.23 (a GPU server
needs none of it):

- ``--device cpu --attention-backend torch_native``: the CPU default backend
  (``intel_amx``) needs a CPU build of sgl-kernel, which PyPI does not have;
- ``--disaggregation-transfer-backend mooncake_tcp``: the prefill refuses
  ``fake``; Mooncake over TCP moves the KV in host memory (``libibverbs1`` must be
  installed for its library to load, even without RDMA);
- ``SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER=1``: the prefill's other send
  path pins memory and records CUDA events;
- the prefill's ``--disable-overlap-schedule``: with overlap, an early send of a
  cached prefix records a CUDA event and the prefill dies on the second request;
- the decode's ``--disaggregation-decode-retraction-backup cpu_tensor``: the
  default host pool registers CUDA-pinned memory;
- ``SGLANG_HOST_IP=127.0.0.1``: the schedulers' ZMQ sockets on loopback.

torch's TCPStore and Mooncake's listeners still bind every address: the real
servers run in a network namespace of their own (a container's private network).
"""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

from pdtui.sim import netns

VERSION = "0.5.23"
PACKAGES = (f"sglang=={VERSION}", "mooncake-transfer-engine-non-cuda==0.3.13.post1")
INSTALL_HINT = "python -m pdtui.sim.real_sglang install"
SERVED = "tiny-gpt2-8k"       # the model's folder (its path is the served model name routers match requests on)
COMMON_ARGS = ("--device", "cpu", "--attention-backend", "torch_native", "--max-total-tokens", "16384",
               "--enable-metrics")
ROLE_ARGS = {"prefill": ("--disable-overlap-schedule",),
             "decode": ("--disaggregation-decode-retraction-backup", "cpu_tensor")}
ENV = {"SGLANG_HOST_IP": "127.0.0.1", "SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER": "1"}
TRANSFER_BACKEND = "mooncake_tcp"
_COMPLETE = ".pdtui-complete"       # written once every package is in: a venv cut short is made again


def engines_folder() -> Path:
    """Where the engines' venvs are kept across runs: ``$PDTUI_ENGINES``, else a machine-wide cache for root and
    the user's own cache otherwise."""
    if os.environ.get("PDTUI_ENGINES"):
        return Path(os.environ["PDTUI_ENGINES"])
    if os.geteuid() == 0:
        return Path("/var/cache/pdtui/engines")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pdtui" / "engines"


def venv() -> Path:
    return engines_folder() / f"sglang-{VERSION}"


def python() -> Path:
    """The Python that runs SGLang: ``$PDTUI_SGLANG_PYTHON`` (one the user installed it into), else the venv's."""
    given = os.environ.get("PDTUI_SGLANG_PYTHON")
    return Path(given) if given else venv() / "bin" / "python"


def missing_reason() -> str | None:
    """Why real SGLang cannot run here, or None when it can."""
    given = os.environ.get("PDTUI_SGLANG_PYTHON")
    if given:
        if not os.access(given, os.X_OK):
            return f"PDTUI_SGLANG_PYTHON={given} is not an executable"
    elif not (venv() / _COMPLETE).exists():
        return f"real SGLang {VERSION} is not installed in {venv()} (run: {INSTALL_HINT})"
    if ctypes.util.find_library("ibverbs") is None:
        return "libibverbs.so.1 is missing: Mooncake's transfer engine cannot load (apt-get install libibverbs1)"
    return None


def install(folder: Path | None = None) -> int:
    """Make the venv (or finish one cut short); a complete one is left as it is."""
    target = folder or venv()
    if (target / _COMPLETE).exists():
        print(f"real SGLang {VERSION}: already in {target}")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    steps = [[sys.executable, "-m", "venv", str(target)],
             [str(target / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PACKAGES]]
    for step in steps:
        if subprocess.run(step).returncode != 0:
            print(f"real SGLang {VERSION}: {' '.join(step)} failed", file=sys.stderr)
            return 1
    (target / _COMPLETE).write_text(" ".join(PACKAGES) + "\n")
    print(f"real SGLang {VERSION}: installed in {target}")
    return 0


def corpus() -> list[Path]:
    """The local text the tiny model's tokenizer learns from: pdtui's own source, there wherever pdtui is."""
    return sorted(Path(__file__).resolve().parents[1].rglob("*.py"))


def models_folder() -> Path:
    """Where ``pdtui demo --real`` keeps its tiny model (made once: the same seeded weights every time)."""
    return engines_folder() / "models"


def make_model(out: Path, corpus: list[Path]) -> Path:
    """The tiny GPT-2 and its tokenizer, trained on ``corpus`` (local text), made by SGLang's own Python in
    ``out/SERVED``; a folder already made is kept."""
    model = out / SERVED
    if (model / "model.safetensors").exists():
        return model
    script = Path(__file__).with_name("tiny_model.py")
    done = subprocess.run([str(python()), str(script), str(model), *map(str, corpus)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"the tiny model could not be made: {done.stderr[-2000:]}")
    return model


def launch(role: str, model: Path) -> dict:
    """A prefill's or decode's ``launch:`` block for real SGLang on this CPU."""
    return {"python": str(python()), "model": str(model), "tp": 1, "transfer_backend": TRANSFER_BACKEND,
            "host": "127.0.0.1", "args": [*COMMON_ARGS, *ROLE_ARGS[role]], "env": dict(ENV)}


def private_network() -> str | None:
    """Move this process, and all it starts from now on, into a network namespace of its own with only loopback
    up: real SGLang's torch store and Mooncake listen on every address. Root unshares it; anyone else through a user
    namespace of their own, where the system allows one, in which they are root (so that ``ip`` may bring loopback
    up): paths that depend on who runs are to be found before. Why it could not be done, or None."""
    why = netns.unshare()
    if why:
        return why
    try:
        done = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    except FileNotFoundError:
        return "ip (iproute2) is not installed: loopback cannot be brought up in the servers' network namespace"
    return None if done.returncode == 0 else f"loopback could not be brought up: {done.stderr.strip()}"


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit(f"usage: {INSTALL_HINT}")
    sys.exit(install())
