"""What an agent pays per call: response sizes of every tool over a real stdio client (issue 15).

    python benchmarks/response_sizes.py                 # this checkout, summary and full mode
    python benchmarks/response_sizes.py --quick         # skip the slow tools (triage, regression test, live run)
    python benchmarks/response_sizes.py --server-root DIR --json before.json   # another checkout (e.g. `git archive`)

Drives the demo flow on a small nanoGPT-style transformer (examples/realistic/transformer_lm/baseline,
the issue's "small transformer run") and the other tools on the galleries, each call in `detail="summary"`
(the default) and `detail="full"` when the tool has the switch. A response's size is the characters of its
text content plus `json.dumps` of its structured content as sent (compact JSON). Also `tools/list` split into descriptions, input
schemas and output schemas, for the whole list and for `--tools core`.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
RUN = "examples/realistic/transformer_lm/baseline"
LOSSES = textwrap.dedent("""
    import torch

    def bce(p, y):
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p))
""")
SWEEP = "lr,seed,val_loss\n" + "".join(f"{lr},{s},{1.0 + abs(lr - 3e-4) * 100 + s * 0.01}\n"
                                       for lr in (1e-4, 3e-4, 1e-3) for s in range(4))


def _size(result) -> tuple[int, int]:
    text = sum(len(getattr(b, "text", "") or "") for b in result.content)
    # compact JSON, characters unescaped: as the SDK sends it on the wire
    structured = (len(json.dumps(result.structured_content, separators=(",", ":"), ensure_ascii=False))
                  if result.structured_content is not None else 0)
    return text, structured


def _file_size(ws: Path, result) -> int | None:
    """Characters of the full report written to a file (detail='full' when it is large), else None."""
    path = (result.structured_content or {}).get("full_data")
    return len((ws / path).read_text()) if path else None


def _decision(result) -> list:
    """What an agent decides on: each finding's failure mode and confidence (the same in both modes)."""
    return [(f.get("failure_mode"), f.get("confidence")) for f in (result.structured_content or {}).get("findings", [])]


def _workspace(tmp: Path) -> Path:
    ws = tmp / "ws"
    shutil.copytree(ROOT / RUN, ws)
    (ws / "losses.py").write_text(LOSSES)
    (ws / "sweep.csv").write_text(SWEEP)
    (ws / "logs").mkdir()
    for name, iters in (("before", 60), ("after", 100)):
        with open(ws / "logs" / f"{name}.log", "w") as out:
            subprocess.run([PY, "train.py", f"--max_iters={iters}", "--eval_interval=50"], cwd=ws, stdout=out,
                           stderr=subprocess.STDOUT, timeout=600, check=False)
    return ws


def _calls(quick: bool) -> list[tuple[str, dict]]:
    target = "train.py:make_target"
    command = ["python", "train.py", "--max_iters=100"]
    calls = [
        ("tail_log", {"path": "logs/after.log"}),
        ("log_metrics", {"path": "logs/after.log"}),
        ("gpu_status", {}),
        ("process_check", {}),
        ("static_scan", {"paths": ["train.py"]}),
        ("grad_norm_snapshot", {"command": command, "steps": 100}),
        ("grad_norm_snapshot", {"target": target}),
        ("nan_hook_run", {"target": target, "max_steps": 20}),
        ("overfit_test", {"target": target, "steps": 60}),
        ("init_loss_check", {"target": target}),
        ("data_check", {"target": target}),
        ("lr_range_test", {"target": target}),
        ("sequence_check", {"target": target}),
        ("compare_runs", {"before": "logs/before.log", "after": "logs/after.log"}),
        ("sweep_analysis", {"path": "sweep.csv", "metric": "val_loss", "param": "lr"}),
        ("loss_surface", {"function": "losses.py:bce", "x_range": [0.0, 1.0], "y_range": [0.0, 1.0], "n": 30,
                          "plot": False}),
        ("profile_steps", {"target": target, "steps": 3}),
        ("journal_append", {"title": "loss flat at 4.1 for 100 steps from a warmup of 2000 iters",
                            "failure_mode": "lr_too_low", "symptom": "loss 4.13 -> 4.0 over 100 iters",
                            "root_cause": "warmup_iters=2000 > max_iters: the LR never left the warmup",
                            "fix": "train.py:317 warmup_iters = 100",
                            "evidence": ["update/weight ratio 2e-5 (grad_norm_snapshot)",
                                         "lr at step 100 = 5e-5 (schedule_check)"],
                            "resolution": "loss 4.13 -> 2.1 after the fix", "tags": ["warmup", "lr"]}),
        ("journal_search", {"query": "warmup"}),
        ("list_runs", {}),
    ]
    if not quick:
        calls += [
            ("triage", {"target": target, "command": command, "log_path": "logs/after.log"}),
            ("write_regression_test", {"failure_mode": "lr_too_low", "target": target, "name": "lr_moves"}),
        ]
    return calls


async def _live(client, ws: Path, rows: list, detail_tools: dict) -> None:
    """run_training, then live_status while it trains, then live_action(stop)."""
    started = await client.call_tool("run_training", {"command": ["python", "train.py", "--max_iters=3000"],
                                                      "log_path": "logs/live.log"})
    rows.append(("run_training", "summary", *_size(started), started.is_error))
    run = ((started.structured_content or {}).get("run") or {}).get("id")
    if not run:
        return
    await anyio.sleep(25)  # let it log steps, so `progress` has its 20 recent steps to show
    for what in (["progress"], ["progress", "memory", "grads"]):
        for detail in ("summary", "full") if "live_status" in detail_tools else ("summary",):
            args = {"run": run, "what": what, **({"detail": detail} if "live_status" in detail_tools else {})}
            r = await client.call_tool("live_status", args)
            rows.append((f"live_status({'+'.join(what)})", detail, *_size(r), r.is_error, 0, [], _file_size(ws, r)))
    stop = await client.call_tool("live_action", {"run": run, "action": "stop"})
    rows.append(("live_action(stop)", "summary", *_size(stop), stop.is_error))


def _stop_strays(ws: Path) -> None:
    """A live run whose stop failed (an older checkout) must not outlive the benchmark: kill its group."""
    import os
    import signal

    for state in (ws / ".mltriage" / "runs").glob("*/state.json"):
        pgid = json.loads(state.read_text()).get("pgid") or json.loads(state.read_text()).get("pid")
        if pgid:
            try:
                os.killpg(int(pgid), signal.SIGKILL)
            except OSError:
                pass


def _compact(obj) -> int:
    return len(json.dumps(obj, separators=(",", ":")))  # as the SDK sends it on the wire


def _tool_list_sizes(tools) -> dict:
    dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return {
        "tools": len(tools),
        "descriptions": sum(len(t.get("description", "")) for t in dumped),
        "input_schemas": sum(_compact(t["inputSchema"]) for t in dumped),
        "output_schemas": sum(_compact(t.get("outputSchema", {})) for t in dumped),
        "total": _compact({"tools": dumped}),
    }


async def _session(root: Path, ws: Path, server_args: list[str]):
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=PY, args=["-m", "server", "--workspace", str(ws), *server_args],
                                   cwd=str(root), env={"PYTHONPATH": str(root)})
    return Client(params)


async def measure(root: Path, ws: Path, quick: bool, only: set[str] | None = None) -> dict:
    rows: list[tuple] = []
    lists = {}
    try:
        async with await _session(root, ws, ["--tools", "core"]) as client:
            lists["core"] = _tool_list_sizes((await client.list_tools()).tools)
    except Exception as e:  # noqa: BLE001 - a checkout without --tools
        lists["core"] = {"error": type(e).__name__}
    async with await _session(root, ws, []) as client:
        tools = (await client.list_tools()).tools
        lists["all"] = _tool_list_sizes(tools)
        detail_tools = {t.name: t.input_schema["properties"]["detail"].get("enum", ["summary", "full"])
                        for t in tools if "detail" in (t.input_schema.get("properties") or {})}
        for name, args in _calls(quick):
            if only and name not in only:
                continue
            modes = ("summary", "full") if name in detail_tools else ("summary",)
            for detail in modes:
                # an older checkout may spell the default differently (sequence_check had 'compact')
                sent = detail if detail in detail_tools.get(name, [detail]) else detail_tools[name][0]
                call_args = {**args, **({"detail": sent} if name in detail_tools else {})}
                if name == "journal_append" and detail == "full":
                    call_args["title"] += " (again)"
                t0 = time.monotonic()
                r = await client.call_tool(name, call_args)
                label = name + ("(command)" if name == "grad_norm_snapshot" and "command" in args else "")
                rows.append((label, detail, *_size(r), r.is_error, round(time.monotonic() - t0, 1), _decision(r),
                             _file_size(ws, r)))
                print(f"{label:28} {detail:8} text {rows[-1][2]:6} structured {rows[-1][3]:6}"
                      f"{'  ERROR ' + (r.content[0].text[:120] if r.content else '') if r.is_error else ''}",
                      file=sys.stderr, flush=True)
        if not quick and (not only or "live" in only):
            await _live(client, ws, rows, detail_tools)
    if not quick:
        _stop_strays(ws)
    return {"rows": rows, "tools_list": lists}


def _print(result: dict) -> None:
    print("| tool | detail | text | structured | total | full report in a file |\n| --- | --- | ---: | ---: | ---: | ---: |")
    summary_totals, decisions, differ = [], {}, []
    for row in result["rows"]:
        name, detail, text, structured, err = row[:5]
        file = row[7] if len(row) > 7 and row[7] else ""
        print(f"| {name} | {detail} | {text} | {structured} | {text + structured}{' (error)' if err else ''} | {file} |")
        if detail == "summary" and not err:
            summary_totals.append(text + structured)
        if len(row) > 6 and not err:
            if detail == "full" and name in decisions and decisions[name] != row[6]:
                differ.append(name)
            decisions[name] = row[6]
    print(f"\nfindings (failure mode, confidence) differ between summary and full: {differ or 'nowhere'}")
    if summary_totals:
        print(f"\ndefault responses: max {max(summary_totals)}, median {statistics.median(summary_totals):.0f} "
              f"characters over {len(summary_totals)} calls")
    print("\n| tools/list | tools | descriptions | input schemas | descriptions + input | output schemas | total |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for which, s in result["tools_list"].items():
        if "error" in s:
            print(f"| {which} | {s['error']} | | | | | |")
            continue
        print(f"| {which} | {s['tools']} | {s['descriptions']} | {s['input_schemas']} | "
              f"{s['descriptions'] + s['input_schemas']} | {s['output_schemas']} | {s['total']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server-root", type=Path, default=ROOT, help="checkout whose `python -m server` is measured")
    ap.add_argument("--quick", action="store_true", help="skip triage, write_regression_test and the live run")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--only", help="comma list of tool names to call ('live' = the live run); default all")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mltriage-sizes-") as tmp:
        ws = _workspace(Path(tmp))
        only = set(args.only.split(",")) if args.only else None
        result = anyio.run(measure, args.server_root.resolve(), ws, args.quick, only)
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
