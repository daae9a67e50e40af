"""Responses an agent can afford (issue 15), over a real stdio MCP client against `python -m server`:
compact by default, `detail="full"` for everything (a large report in a new file under .mltriage/),
structured content valid against the tool's published outputSchema in both modes, truthful
annotations, and `--tools` sets."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import anyio
import jsonschema
import pytest

from _shared_threads import ONE_THREAD  # the server hands it to the probes and scripts it starts
from conftest import EXAMPLES, PYTHON, ROOT, run, stdio_client, text_of

LM = EXAMPLES / "realistic" / "transformer_lm" / "baseline"
LIVE = Path(__file__).resolve().parent / "fixtures" / "live"
NOT_READ_ONLY = {"run_training", "live_action", "journal_append", "write_regression_test"}
CORE_ONLY_OUT = {"run_training", "list_runs", "live_status", "live_action", "inspect_checkpoint", "sweep_analysis",
                 "loss_surface", "profile_steps"}


def _size(result) -> int:
    """What the agent pays: the text content plus the structured content as JSON."""
    return sum(len(getattr(b, "text", "") or "") for b in result.content) + len(json.dumps(result.structured_content))


def _valid(schema: dict, result) -> None:
    assert not result.is_error, text_of(result)
    jsonschema.validate(result.structured_content, schema, cls=jsonschema.Draft202012Validator)


def _digits_ok(value) -> bool:
    """Every float has at most 4 significant digits."""
    if isinstance(value, float):
        return value == float(f"{value:.4g}")
    if isinstance(value, dict):
        return all(_digits_ok(v) for v in value.values())
    if isinstance(value, list):
        return all(_digits_ok(v) for v in value)
    return True


async def _schemas(c) -> dict:
    return {t.name: t.output_schema for t in (await c.list_tools()).tools}


def test_grad_norm_snapshot_summary_is_small_and_full_goes_to_new_files(workspace, no_stray_processes):
    shutil.copytree(LM, workspace, dirs_exist_ok=True)
    args = {"command": ["python", "train.py", "--max_iters=12"], "steps": 12}  # > SERIES_MAX: summarised

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as c:
            schema = (await _schemas(c))["grad_norm_snapshot"]
            summary = await c.call_tool("grad_norm_snapshot", args)
            full = await c.call_tool("grad_norm_snapshot", {**args, "detail": "full"})
            for r in (summary, full):
                _valid(schema, r)
            return summary, full

    summary, full = run(body)
    s = summary.structured_content
    assert _size(summary) <= 4000, _size(summary)
    assert _digits_ok(s)
    assert len(s["params"]) <= 6 and "params" in s["omitted"]  # 15 parameters: the top 6 shown, the cut named
    assert s["summarised"]["grad_norm_history"]["n"] == 12 and s["grad_norm_history"] == []
    assert "full_data" not in s
    # full: too large to send inline, so the whole report is a new file (never an existing one: the next test)
    # and the reply says where
    paths = [full.structured_content["full_data"]]
    assert paths[0].startswith(".mltriage/reports/")
    first = json.loads((workspace / paths[0]).read_text())
    assert len(first["params"]) == 15 and len(first["grad_norm_history"]) == 12
    assert first["grad_norm_history"][0] != round(first["grad_norm_history"][0], 4)  # full precision
    assert any(getattr(b, "type", "") == "resource_link" and b.uri.endswith(paths[0]) for b in full.content)
    assert paths[0] in text_of(full)


def test_a_full_report_never_overwrites_an_existing_file(workspace):
    """The file name is taken with O_EXCL: a file already there (even with the name a call would pick) stays."""
    from server import core

    core.configure(workspace)
    folder = workspace / ".mltriage" / "reports"
    folder.mkdir(parents=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for name in (f"probe-{stamp}.json", f"probe-{stamp}-2.json"):
        (folder / name).write_text("mine")
    written = core._save_full("probe", '{"x": 1}')
    assert written.startswith(".mltriage/reports/probe-") and json.loads((workspace / written).read_text()) == {"x": 1}
    assert [(folder / n).read_text() for n in (f"probe-{stamp}.json", f"probe-{stamp}-2.json")] == ["mine", "mine"]


def test_lr_range_test_summary_downsamples_the_curve(workspace, no_stray_processes):
    shutil.copytree(EXAMPLES / "lr_too_high", workspace, dirs_exist_ok=True)

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as c:
            schema = (await _schemas(c))["lr_range_test"]
            summary = await c.call_tool("lr_range_test", {"target": "train.py:make_target", "steps": 80})
            full = await c.call_tool("lr_range_test", {"target": "train.py:make_target", "steps": 80,
                                                       "detail": "full"})
            _valid(schema, summary)
            _valid(schema, full)
            return summary, full

    summary, full = run(body)
    s, f = summary.structured_content, full.structured_content
    whole = json.loads((Path(workspace) / f["full_data"]).read_text()) if "full_data" in f else f
    assert len(whole["curve"]) > 32 and len(s["curve"]) <= 32
    assert s["suggested_lr"] == float(f"{whole['suggested_lr']:.4g}")  # the decision is the same number
    lowest = min(p["loss"] for p in whole["curve"] if isinstance(p["loss"], float))
    assert float(f"{lowest:.4g}") in [p["loss"] for p in s["curve"]]  # the curve's minimum survives
    assert _size(summary) <= 4000 and _digits_ok(s)


def test_journal_append_returns_the_entry_once(workspace):
    entry = {"title": "NaN loss at step 12 from log(0)", "failure_mode": "nan_inf", "symptom": "loss nan at step 12",
             "root_cause": "log of a softmax that underflows to 0", "fix": "train.py:40 log_softmax",
             "evidence": ["nan_hook_run: op log at train.py:40, input min 0.0"], "tags": ["nan"]}

    async def body():
        async with stdio_client(workspace) as c:
            schema = (await _schemas(c))["journal_append"]
            summary = await c.call_tool("journal_append", entry)
            full = await c.call_tool("journal_append", {**entry, "title": entry["title"] + " again",
                                                        "detail": "full"})
            _valid(schema, summary)
            _valid(schema, full)
            return summary, full

    summary, full = run(body)
    s = summary.structured_content
    assert s["entry"]["root_cause"] == entry["root_cause"] and s["markdown"] == ""
    assert entry["root_cause"] not in text_of(summary)  # the text is one line; the entry is the structured part
    assert _size(summary) <= 1500, _size(summary)
    assert entry["root_cause"] in full.structured_content["markdown"]
    journal = (workspace / "journal.md").read_text()
    assert journal.count(entry["root_cause"]) == 2  # both calls appended; the summary only shapes the reply


def test_triage_summary_and_full_both_match_the_schema(workspace, no_stray_processes):
    shutil.copytree(EXAMPLES / "nan_log_zero", workspace / "nan_log_zero")

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as c:
            schema = (await _schemas(c))["triage"]
            args = {"target": "nan_log_zero/train.py:make_target"}
            summary = await c.call_tool("triage", args)
            full = await c.call_tool("triage", {**args, "detail": "full"})
            _valid(schema, summary)
            _valid(schema, full)
            return summary, full

    summary, full = run(body)
    s, f = summary.structured_content, full.structured_content
    assert s["findings"][0]["failure_mode"] == f["findings"][0]["failure_mode"] == "nan_inf"
    assert _size(summary) <= 4000 and _size(summary) <= _size(full)
    shown = [(e.get("what"), json.dumps(e.get("value"))) for x in s["findings"] for e in x["evidence"]
             if not e["what"].startswith("same evidence as")]
    assert len(shown) == len(set(shown))  # no evidence line repeated under two findings


def test_live_status_summary_rounds_the_recent_steps(workspace, no_stray_processes):
    state: dict = {}

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as c:
            schema = (await _schemas(c))["live_status"]
            r = await c.call_tool("run_training", {"command": ["python", str(LIVE / "normal.py")],
                                                   "log_path": "logs/train.log"})
            assert not r.is_error, text_of(r)
            state["id"] = r.structured_content["run"]["id"]
            try:
                deadline = time.monotonic() + 40
                while True:
                    s = (await c.call_tool("live_status", {"run": state["id"]})).structured_content
                    if s["progress"] and s["progress"][0]["step"] >= 25:
                        break
                    assert time.monotonic() < deadline, s
                    await anyio.sleep(0.5)
                what = ["progress", "memory", "grads"]
                summary = await c.call_tool("live_status", {"run": state["id"], "what": what})
                full = await c.call_tool("live_status", {"run": state["id"], "what": what, "detail": "full"})
                _valid(schema, summary)
                _valid(schema, full)
                return summary, full
            finally:
                await c.call_tool("live_action", {"run": state["id"], "action": "stop"})

    summary, full = run(body)
    assert _digits_ok(summary.structured_content) and _size(summary) <= 4000
    assert _size(summary) < _size(full)


def test_every_tool_has_a_title_and_truthful_annotations(workspace):
    async def body():
        async with stdio_client(workspace) as c:
            return (await c.list_tools()).tools

    tools = {t.name: t for t in run(body)}
    for name, t in tools.items():
        a = t.annotations
        assert t.title and a is not None, name
        assert None not in (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint), name
        assert a.open_world_hint is False, name  # nothing reaches beyond this machine
        assert "detail" in t.input_schema["properties"], name
        jsonschema.Draft202012Validator.check_schema(t.output_schema)
        jsonschema.Draft202012Validator.check_schema(t.input_schema)
    for name in NOT_READ_ONLY | {"triage", "grad_norm_snapshot", "nan_hook_run", "profile_steps"}:
        assert tools[name].annotations.read_only_hint is False, name  # they write files or run the user's script
    assert tools["live_action"].annotations.destructive_hint is True  # it can stop a run
    assert tools["journal_append"].annotations.destructive_hint is False  # append-only
    assert tools["write_regression_test"].annotations.idempotent_hint is False  # a second call writes _2
    for name in ("tail_log", "log_metrics", "static_scan", "journal_search", "list_runs", "compare_runs"):
        assert tools[name].annotations.read_only_hint is True, name


def test_core_tool_set_lists_only_core_and_refuses_the_rest_clearly(workspace):
    async def body():
        async with stdio_client(workspace, "--tools", "core") as c:
            names = {t.name for t in (await c.list_tools()).tools}
            refused = await c.call_tool("live_status", {"run": "x"})
            allowed = await c.call_tool("journal_search", {})
            return names, refused, allowed

    names, refused, allowed = run(body)
    assert {"tail_log", "triage", "grad_norm_snapshot", "journal_append", "write_regression_test"} <= names
    assert not names & CORE_ONLY_OUT
    assert refused.is_error and "not loaded" in text_of(refused) and "--tools" in text_of(refused)
    assert not allowed.is_error


def test_a_tool_list_picks_sets_and_names(workspace):
    async def body():
        async with stdio_client(workspace, "--tools", "tail_log, live") as c:
            return {t.name for t in (await c.list_tools()).tools}

    assert run(body) == {"tail_log", "run_training", "list_runs", "live_status", "live_action", "inspect_checkpoint"}


@pytest.mark.parametrize("spec", ["bogus", "core,tail_logs", ","])
def test_an_unknown_tool_name_is_a_one_line_error(tmp_path, spec):
    proc = subprocess.run([PYTHON, "-m", "server", "--workspace", str(tmp_path), "--tools", spec], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mltriage: ") and "--tools" in lines[0], proc.stderr


def test_install_writes_the_tool_set_into_the_client_config(tmp_path):
    from server import install

    home = tmp_path / "home"
    home.mkdir()
    install.apply(install.plan("claude", "project", tmp_path, home, tools="core,live_status"), out=open("/dev/null", "w"))
    entry = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]["mltriage"]
    assert entry["args"][entry["args"].index("--tools") + 1] == "core,live_status"
    with pytest.raises(install.InstallError, match="unknown tool"):
        install.plan("claude", "project", tmp_path, home, tools="core,nope")


def _titles(node, in_properties=False) -> list:
    """`title` keywords in a schema (a property named title does not count)."""
    if isinstance(node, list):
        return [x for v in node for x in _titles(v)]
    if not isinstance(node, dict):
        return []
    found = [node["title"]] if not in_properties and isinstance(node.get("title"), str) else []
    return found + [x for k, v in node.items() for x in _titles(v, k in ("properties", "$defs"))]


def test_the_tool_list_is_lighter_and_each_output_schema_stands_alone(workspace):
    """Every output schema resolves its own $refs (a client validates it alone) and repeated shapes are shared."""

    async def body():
        async with stdio_client(workspace) as c:
            return (await c.list_tools()).tools

    tools = run(body)
    for t in tools:
        text = json.dumps(t.output_schema)
        assert not _titles(t.output_schema), t.name  # pydantic's per-property titles are gone
        for ref in {r.split('"')[0] for r in text.split('"$ref": "#/$defs/')[1:]}:
            assert ref in t.output_schema["$defs"], (t.name, ref)
        assert text.count('"nan", "inf", "-inf"') <= 1, t.name  # Num is defined once per schema
    wire = lambda obj: len(json.dumps(obj, separators=(",", ":")))
    model_sees = sum(len(t.description) + wire(t.input_schema) for t in tools)
    assert model_sees <= 20000, model_sees  # issue 15's budget for all tools (the core set's is 12,000)
    assert wire([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]) <= 60000


@pytest.mark.parametrize("version, linked", [("2025-03-26", False), ("2025-06-18", True)])
def test_a_full_report_in_a_file_is_a_resource_link_only_for_clients_that_know_them(workspace, version, linked):
    from test_stdio import RawPeer

    (workspace / "train.log").write_text("".join(f"step {i}: loss {4 - i / 500:.6f} lr 3e-4 time 12.5ms\n"
                                                 for i in range(600)))
    peer = RawPeer(workspace)
    try:
        peer.request(1, "initialize", {"protocolVersion": version, "capabilities": {},
                                       "clientInfo": {"name": "old-or-new", "version": "1"}})
        peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        answer = peer.request(2, "tools/call", {"name": "tail_log",
                                                "arguments": {"path": "train.log", "lines": 400, "detail": "full"}})
    finally:
        peer.close()
    result = answer["result"]
    path = result["structuredContent"]["full_data"]
    assert (workspace / path).is_file() and len(json.loads((workspace / path).read_text())["lines"]) == 400
    assert any(b["type"] == "resource_link" for b in result["content"]) is linked
    assert path in result["content"][0]["text"]
