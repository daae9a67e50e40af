"""`mltriage demo`: drive the real server over stdio the way an agent would, on a bundled broken run.

tail_log -> log_metrics -> triage (target + the user's command) -> the write_regression_test call triage suggests,
BEFORE the fix (it must fail now) -> apply the known fix -> run_regression_test (it must pass) -> re-run and
compare_runs on the finding's metric -> journal_append citing the test.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import anyio

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_EXAMPLE = "nan_log_zero"
STEPS = "60"


def _say(title: str, body: str = "") -> None:
    print(f"\n\033[1m> {title}\033[0m" if sys.stdout.isatty() else f"\n> {title}")
    if body:
        print(textwrap.indent(body.rstrip(), "  "))


def _first_lines(text: str, n: int = 8) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:n] + (["..."] if len(lines) > n else []))


def _train(workspace: Path, log: str) -> float:
    """Run the workspace's train.py as the user would, its output to `log`; returns wall seconds."""
    (workspace / "logs").mkdir(exist_ok=True)
    start = time.monotonic()
    with open(workspace / log, "w") as out:
        subprocess.run([sys.executable, "train.py", "--steps", STEPS], cwd=workspace, stdout=out,
                       stderr=subprocess.STDOUT, timeout=120)
    return time.monotonic() - start


async def _drive(workspace: Path, meta: dict) -> int:
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    root = str(Path(__file__).resolve().parent.parent)
    params = StdioServerParameters(command=sys.executable, args=["-m", "server", "--workspace", str(workspace)],
                                   cwd=root, env={"PYTHONPATH": root, **{k: v for k, v in os.environ.items() if k.startswith("MLTRIAGE_")}})

    async def call(client, name, args, show=8):
        _say(f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
        t = time.monotonic()
        result = await client.call_tool(name, args)
        text = "\n".join(getattr(b, "text", "") for b in result.content)
        print(textwrap.indent(_first_lines(text, show), "  "))
        print(f"  ({time.monotonic() - t:.1f} s{', ERROR' if result.is_error else ''})")
        return result.structured_content or {}, result.is_error

    async with Client(params) as client:
        tools = await client.list_tools()
        _say(f"connected to mltriage over stdio: {len(tools.tools)} tools")
        await call(client, "tail_log", {"path": "logs/train.log", "lines": 50})
        await call(client, "log_metrics", {"path": "logs/train.log"})
        command = ["python", "train.py", "--steps", STEPS]
        report, _ = await call(client, "triage", {"target": "train.py:make_target", "command": command,
                                                  "log_path": "logs/train.log", "source_paths": ["train.py"]}, show=14)
        findings = report.get("findings") or [{}]
        top = findings[0]
        mode = top.get("failure_mode", meta["failure_mode"])
        verdict = "matches" if mode == meta["failure_mode"] else f"differs from the label {meta['failure_mode']!r}"
        _say(f"top finding: {mode} ({top.get('confidence', 0):.0%}) — {verdict}")

        suggested = next((n.get("args") or {} for n in report.get("next_steps", [])
                          if n.get("tool") == "write_regression_test"), None)
        args = {**(suggested or {"failure_mode": meta["failure_mode"], "target": "train.py:make_target"}),
                "name": meta["name"]}
        test, err = await call(client, "write_regression_test", args)
        test_path = test.get("path")
        _say("the regression test on the broken code, before any fix",
             f"fails_now={test.get('fails_now')} (it must fail: it pins the bug)")

        shutil.copy(workspace / "train_fixed.py.orig", workspace / "train.py")
        _say("apply the known fix", meta.get("fix", ""))
        passed = None
        if test_path:
            rerun, _ = await call(client, "run_regression_test", {"path": test_path})
            passed = rerun.get("passes_now")
        seconds = _train(workspace, "logs/train_fixed.log")
        _say(f"re-run the fixed training ({seconds:.1f} s)")
        cmp, _ = await call(client, "compare_runs", {"before": "logs/train.log", "after": "logs/train_fixed.log",
                                                     "failure_mode": mode})

        evidence = [f"{e.get('what')} = {e.get('value')} ({e.get('source')})" for e in top.get("evidence", [])[:4]]
        await call(client, "journal_append", {
            "title": meta["summary"], "failure_mode": meta["failure_mode"],
            "symptom": top.get("summary", meta["summary"]), "root_cause": meta["bug"], "fix": meta["fix"],
            "evidence": "\n".join(evidence) or None,
            "resolution": f"compare_runs verdict: {cmp.get('verdict')}",
            "test_path": test_path, "tags": ["demo", meta["name"]]})
        ok = mode == meta["failure_mode"] and test.get("fails_now") is True and passed and cmp.get("verdict") == "improved"
        _say("demo " + ("succeeded" if ok else "finished with a mismatch (see above)"),
             f"workspace kept at {workspace}: journal.md, {test_path}, logs/")
        return 0 if ok else 1


def run(args) -> int:
    if not EXAMPLES.is_dir():
        # the examples live in the repository, not in the wheel (they are training scripts, not package data)
        print("mltriage demo: the bundled examples come with a checkout of the repository, not with the installed "
              "package; clone the repository and run `make demo` there", file=sys.stderr)
        return 2
    name = args.example or DEFAULT_EXAMPLE
    src = EXAMPLES / name
    if not (src / "example.json").exists():
        known = sorted(p.name for p in EXAMPLES.iterdir() if (p / "example.json").exists())
        print(f"mltriage demo: no example {name!r}; choose one of: {', '.join(known)}", file=sys.stderr)
        return 2
    meta = json.loads((src / "example.json").read_text())
    if not (src / "train_fixed.py").exists():
        print(f"mltriage demo: {name!r} is a healthy run; pick a broken one", file=sys.stderr)
        return 2
    workspace = Path(tempfile.mkdtemp(prefix=f"mltriage-demo-{name}-"))
    shutil.copy(src / "train.py", workspace / "train.py")
    # kept out of the agent's sight under another name: it is the fix the demo applies later
    shutil.copy(src / "train_fixed.py", workspace / "train_fixed.py.orig")
    _say(f"example {name!r}: {meta['summary']}", f"workspace: {workspace}")
    seconds = _train(workspace, "logs/train.log")
    _say(f"python train.py --steps {STEPS}  ({seconds:.1f} s) -> logs/train.log")
    start = time.monotonic()
    code = anyio.run(_drive, workspace, meta)
    print(f"\ndemo wall time: {time.monotonic() - start + seconds:.1f} s")
    return code
