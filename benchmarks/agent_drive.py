"""Drive mltriage as an agent would, over a real stdio MCP client, on one gallery run: run its train.py for the
log, call triage (target + command + log), call write_regression_test exactly as triage's next step gives it,
apply train_fixed.py, call run_regression_test. Prints each reply as the agent reads it, with its time and size.

    python benchmarks/agent_drive.py [RUN_DIR]   # default: the blind dev run syslog_char_lstm_lm
"""
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from conftest import stdio_client  # noqa: E402 - the same client the stdio tests use

DEFAULT_RUN = ROOT / "examples" / "realistic" / "rnn_seq" / "syslog_char_lstm_lm"
src = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_RUN
ws = Path(tempfile.mkdtemp(prefix="mltriage-drive-"))


def prepare() -> None:
    for item in src.iterdir():
        if item.name not in ("train_fixed.py", "example.json", "__pycache__"):
            (shutil.copytree if item.is_dir() else shutil.copy)(item, ws / item.name)
    (ws / "logs").mkdir(exist_ok=True)
    with open(ws / "logs/train.log", "w") as out:
        subprocess.run([sys.executable, "train.py"], cwd=ws, stdout=out, stderr=subprocess.STDOUT, timeout=180)


def text(r):
    return "\n".join(c.text for c in r.content if getattr(c, "text", None))

async def main():
    async with stdio_client(ws) as c:
        t = time.monotonic()
        r = await c.call_tool("triage", {"target": "train.py:make_target", "command": ["python", "train.py"],
                                         "log_path": "logs/train.log"})
        tx = text(r)
        print(f"--- triage {time.monotonic()-t:.1f}s, {len(tx)} chars text, {len(json.dumps(r.structured_content))} json\n{tx}")
        nxt = [n for n in (r.structured_content or {}).get("next_steps", []) if n["tool"] == "write_regression_test"]
        if not nxt:
            print("no write_regression_test step")
            return
        args = nxt[0]["args"]
        t = time.monotonic()
        w = await c.call_tool("write_regression_test", args)
        print(f"--- write_regression_test {args} {time.monotonic()-t:.1f}s\n{text(w)[:1500]}")
        if (src / "train_fixed.py").exists():
            shutil.copy(src / "train_fixed.py", ws / "train.py")
            t = time.monotonic()
            f = await c.call_tool("run_regression_test", {"path": w.structured_content["path"]})
            print(f"--- after the fix {time.monotonic()-t:.1f}s\n{text(f)[:800]}")


if __name__ == "__main__":
    try:
        prepare()
        anyio.run(main)
    finally:
        shutil.rmtree(ws, ignore_errors=True)
