"""Run the distributed gallery for real (torchrun, gloo, CPU) and keep each job's rank logs.

    python examples/distributed/generate.py OUT [name ...]

writes OUT/<name>/ (torchrun --log-dir: <run_id>/attempt_0/<rank>/{stdout,stderr}.log, error.json) and
OUT/<name>.console.log (the launcher's own output, kept apart: the analysis must work from the rank logs alone).
Each example's example.json gives nproc and args; a job that hangs is stopped at its collective timeout by gloo.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def examples() -> list[str]:
    return sorted(p.parent.name for p in HERE.glob("*/example.json"))


def run(name: str, out: Path, timeout_s: float = 180.0, args: list[str] | None = None) -> dict:
    """One job under torchrun (its own free port: jobs may run side by side); returns its exit code and wall time.
    `args` replaces the example's own script arguments."""
    meta = json.loads((HERE / name / "example.json").read_text())
    logs = out / name
    logs.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(meta.get("nproc", 4)),
           "--log-dir", str(logs), "--redirects", "3", "--tee", "3", "--monitor-interval", "0.2",
           str(HERE / name / "train.py"), *(meta.get("args", []) if args is None else args)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    t = time.monotonic()
    with open(out / f"{name}.console.log", "wb") as console:
        try:
            rc = subprocess.run(cmd, stdout=console, stderr=subprocess.STDOUT, env=env, timeout=timeout_s,
                                start_new_session=True).returncode
        except subprocess.TimeoutExpired:
            rc = None
    return {"name": name, "returncode": rc, "seconds": round(time.monotonic() - t, 1), "logs": str(logs)}


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    for name in sys.argv[2:] or examples():
        print(json.dumps(run(name, out)))
