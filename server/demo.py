"""`mltriage demo`: drive the real server over stdio the way an agent would, on a bundled broken run.

tail_log -> log_metrics -> triage -> write_regression_test (fails on the bug) -> apply the known fix
-> re-run and compare_runs -> the regression test passes -> journal_append.
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


def _pytest(workspace: Path, test_path: str) -> tuple[bool, str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_path],
                       cwd=workspace, capture_output=True, text=True, timeout=180)
    return r.returncode == 0, (r.stdout + r.stderr).strip().splitlines()[-1]


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
        report, _ = await call(client, "triage", {"target": "train.py:make_target", "log_path": "logs/train.log",
                                                  "source_paths": ["train.py"]}, show=14)
        findings = report.get("findings") or [{}]
        top = findings[0]
        mode = top.get("failure_mode", meta["failure_mode"])
        verdict = "matches" if mode == meta["failure_mode"] else f"differs from the label {meta['failure_mode']!r}"
        _say(f"top finding: {mode} ({top.get('confidence', 0):.0%}) — {verdict}")

        test, err = await call(client, "write_regression_test",
                               {"failure_mode": meta["failure_mode"], "name": meta["name"],
                                "target": "train.py:make_target"})
        test_path = test.get("path")
        _say("the regression test on the broken code", f"passed={test.get('passed')} (it must fail: it pins the bug)")

        shutil.copy(workspace / "train_fixed.py.orig", workspace / "train.py")
        _say("apply the known fix", meta.get("fix", ""))
        seconds = _train(workspace, "logs/train_fixed.log")
        _say(f"re-run the fixed training ({seconds:.1f} s)")
        cmp, _ = await call(client, "compare_runs", {"before": "logs/train.log", "after": "logs/train_fixed.log"})

        passed = None
        if test_path:
            passed, last = _pytest(workspace, test_path)
            _say(f"the regression test on the fixed code: {'passed' if passed else 'FAILED'}", last)

        evidence = [f"{e.get('what')} = {e.get('value')} ({e.get('source')})" for e in top.get("evidence", [])[:4]]
        await call(client, "journal_append", {
            "title": meta["summary"], "failure_mode": meta["failure_mode"],
            "symptom": top.get("summary", meta["summary"]), "root_cause": meta["bug"], "fix": meta["fix"],
            "evidence": "\n".join(evidence) or None,
            "resolution": f"compare_runs verdict: {cmp.get('verdict')}",
            "test_path": test_path, "tags": ["demo", meta["name"]]})
        ok = mode == meta["failure_mode"] and test.get("passed") is False and passed and cmp.get("verdict") == "improved"
        _say("demo " + ("succeeded" if ok else "finished with a mismatch (see above)"),
             f"workspace kept at {workspace}: journal.md, {test_path}, logs/")
        return 0 if ok else 1


def run(args) -> int:
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
