"""How long a prefill/decode mismatch takes to be refused: ``pdtui demo --fail decode:page-size``, headless.

The demo's decode runs page size 128, its prefill 64; the preflight reads both installed units and refuses the pair
before anything starts. Figures: from the engine's start to the ``preflight`` finding and to the ``done`` event
(the events' own ``elapsed``), and the whole command's wall time (Python's start, the demo's sandbox, its clean-up).
Compare with the minutes a real server spends loading weights before SGLang's own check fails its first request.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import emit, machine, parse_args, summary  # noqa: E402


def one() -> tuple[float, float, float]:
    """(to the finding, to done, the command's wall time), seconds."""
    t0 = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "pdtui", "demo", "--json", "--no-load", "--fail", "decode:page-size"],
                            capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - t0
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    finding = next(e for e in events if e["kind"] == "preflight" and e["level"] == "error")
    done = next(e for e in events if e["kind"] == "done")
    if result.returncode != 1 or done["ok"]:
        raise RuntimeError(f"the demo was not refused: {result.returncode} {result.stderr[-500:]}")
    return finding["elapsed"], done["elapsed"], wall


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    runs = [one() for _ in range(2 if args.quick else 7)]
    emit({"machine": machine(), "quick": args.quick, "unit": "ms",
          "to_finding": summary([r[0] for r in runs], 1000, 0), "to_done": summary([r[1] for r in runs], 1000, 0),
          "command_wall": summary([r[2] for r in runs], 1000, 0)})


if __name__ == "__main__":
    main()
