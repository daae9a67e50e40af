"""The skill pack: Agent Skills rules, skills <-> tools cross-reference, and serving over MCP (in-process and stdio)."""

import ast
import difflib
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import anyio
import jsonschema
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import PaginatedRequestParams, Request, RequestParams
from pydantic import TypeAdapter

from tools.failure_modes import FAILURE_MODES

REPO = Path(__file__).resolve().parent.parent
SKILLS = REPO / "skills"
EXPECTED_SKILLS = {
    "ml-training-triage", "training-anti-patterns", "training-folklore-priors", "loss-curve-reading",
    "nan-inf-hunting", "gradient-health", "hangs-oom-throughput", "experiment-sweeps", "metric-wont-move",
    "fix-journal-and-regression-test", "distributed-failures",
}
ALLOWED_FIELDS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}

PROMPT_ARGS = {
    "triage_training_failure": {"symptom": "loss is NaN at step 500", "log_path": "logs/train.log",
                                "target": "train.py:make_target"},
    "after_fix": {"title": "NaN from log(0) in the entropy bonus", "failure_mode": "nan_inf",
                  "before_log": "logs/before.log", "after_log": "logs/after.log", "function": "model.py:entropy"},
    "use_skill": {"name": "gradient-health"},
}


# --- helpers --------------------------------------------------------------------------------


def skill_mds() -> list[Path]:
    return sorted(SKILLS.glob("*/SKILL.md"))


def all_markdown() -> list[Path]:
    return sorted(SKILLS.rglob("*.md"))


def split_frontmatter(text: str) -> tuple[list[str], list[str]]:
    lines = text.splitlines()
    assert lines[0] == "---", "SKILL.md must open with '---'"
    end = lines.index("---", 1)
    return lines[1:end], lines[end + 1:]


def strict_frontmatter(lines: list[str]) -> dict[str, Any]:
    """An independent reader for the YAML subset a SKILL.md may use; rejects anything ambiguous."""
    out: dict[str, Any] = {}
    current: dict[str, str] | None = None
    for line in lines:
        if line.startswith("  "):
            assert current is not None, f"indented line outside a mapping: {line!r}"
            k, _, v = line.strip().partition(": ")
            current[k] = v.strip('"')
            continue
        k, sep, v = line.partition(":")
        assert sep and re.fullmatch(r"[a-z-]+", k), f"bad frontmatter line {line!r}"
        v = v.strip()
        if not v:
            current = out[k] = {}
        else:
            current = None
            if not v.startswith('"'):
                assert ": " not in v and " #" not in v, f"unquoted YAML value would not parse: {line!r}"
            out[k] = v[1:-1] if v.startswith('"') else v
    return out


def code_spans(text: str) -> list[str]:
    """Inline `code` spans outside fenced blocks (fences hold examples, not tool references)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


def tool_mentions(text: str) -> tuple[set[str], set[str]]:
    """(names written as calls `name(...)`, bare names `name`) in a skill's inline code. Tools are snake_case;
    a CamelCase call such as `StepLR(step_size=30)` constructs a class."""
    calls, bare = set(), set()
    for span in code_spans(text):
        m = re.match(r"([a-z_][a-z0-9_]*)\(", span)
        if m:
            calls.add(m.group(1))
        elif re.fullmatch(r"[a-z_][a-z0-9_]*", span):
            bare.add(span)
    return calls, bare


def server():
    import server.app  # noqa: F401 - registers every tool, skill resource and prompt
    from server.core import mcp

    return mcp


def live_tools() -> dict[str, dict[str, Any]]:
    """name -> input schema of every tool the server registers, as an in-process MCP client lists them."""
    async def go():
        async with Client(server()) as c:
            return {t.name: t.input_schema for t in (await c.list_tools()).tools}

    return anyio.run(go)


def canonical_tools() -> set[str]:
    live = set(live_tools())
    assert live, "the server registers no tools: nothing to check the skills against"
    return live


def call_spans(text: str) -> list[str]:
    """Inline code spans written as a call `name(...)`."""
    return [s for s in code_spans(text) if re.match(r"[a-z_][a-z0-9_]*\(", s)]


def placeholder(value: Any) -> bool:
    """`...` anywhere in a literal marks an example to be filled in, not a value to validate."""
    if value is Ellipsis:
        return True
    if isinstance(value, (list, tuple, set)):
        return any(placeholder(v) for v in value)
    if isinstance(value, dict):
        return any(placeholder(v) for v in (*value, *value.values()))
    return False


def call_problems(span: str, schemas: dict[str, dict[str, Any]]) -> list[str]:
    """What is wrong with one `tool(arg=value, ...)` span against the tool's input schema: unknown keyword
    arguments, literal values the schema rejects, required arguments missing from a call that spells out all
    of its arguments. Placeholders (`...`, `<pid>`, a bare name) are only checked by their keyword."""
    name = span.split("(", 1)[0]
    schema = schemas[name]
    props = schema.get("properties", {})
    try:
        call = ast.parse(span, mode="eval").body
    except SyntaxError:
        call = None
    if not isinstance(call, ast.Call):  # placeholders such as pid=<pid>: read the keywords only
        keys = re.findall(r"[(,]\s*([a-z_][a-z0-9_]*)=(?!=)", span)
        return [f"{name}() has no argument {k!r}" for k in keys if k not in props]
    problems = [f"{name}() has no argument {kw.arg!r}" for kw in call.keywords if kw.arg not in props]
    for kw in call.keywords:
        if kw.arg not in props:
            continue
        try:
            value = ast.literal_eval(kw.value)
        except ValueError:
            continue
        if placeholder(value):
            continue
        try:
            jsonschema.validate(value, props[kw.arg])
        except jsonschema.ValidationError as e:
            problems.append(f"{name}({kw.arg}={value!r}): {e.message}")
    spelled_out = not call.args and not any(isinstance(k.value, ast.Constant) and k.value.value is Ellipsis
                                            for k in call.keywords)
    if spelled_out:
        given = {kw.arg for kw in call.keywords}
        problems += [f"{name}() misses required argument {r!r}" for r in schema.get("required", []) if r not in given]
    return problems


def defined_names(text: str) -> set[str]:
    """Names a skill defines itself: `def name(` in an example, the function of a 'file.py:name' spec."""
    return set(re.findall(r"\bdef ([a-z_][a-z0-9_]*)\(", text)) | set(re.findall(r"\.py:([A-Za-z_][A-Za-z0-9_]*)", text))


SNAKE = re.compile(r"(?<![\w.])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)")


class ListSkills(Request[PaginatedRequestParams | None, Literal["skills/list"]]):
    method: Literal["skills/list"] = "skills/list"
    params: PaginatedRequestParams | None = None


class GetSkillParams(RequestParams):
    uri: str


class GetSkill(Request[GetSkillParams, Literal["skills/get"]]):
    method: Literal["skills/get"] = "skills/get"
    params: GetSkillParams


ANY = TypeAdapter(dict[str, Any])


# --- Agent Skills rules ---------------------------------------------------------------------


def test_the_ten_skills_of_the_pack_exist():
    assert {p.parent.name for p in skill_mds()} == EXPECTED_SKILLS


@pytest.mark.parametrize("skill_md", skill_mds(), ids=lambda p: p.parent.name)
def test_skill_md_follows_the_agent_skills_spec(skill_md: Path):
    fm_lines, body = split_frontmatter(skill_md.read_text(encoding="utf-8"))
    fm = strict_frontmatter(fm_lines)
    assert set(fm) <= ALLOWED_FIELDS, f"fields outside the spec: {set(fm) - ALLOWED_FIELDS}"
    name = fm["name"]
    assert name == skill_md.parent.name
    assert len(name) <= 64 and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name)
    assert 0 < len(fm["description"]) <= 1024
    assert "Use when" in fm["description"] or "use when" in fm["description"], "description must say when to use it"
    assert len(fm.get("compatibility", "")) <= 500
    assert isinstance(fm.get("metadata", {}), dict)
    assert len(body) < 500
    assert sum(1 for line in body if line.strip()) > 20, "a skill body with real content"


def skills_ref_validate(skill_dir: Path) -> subprocess.CompletedProcess:
    """`agentskills validate DIR`: the CLI of skills-ref, the Agent Skills spec's reference validator."""
    return subprocess.run([str(Path(sys.executable).parent / "agentskills"), "validate", str(skill_dir)],
                          capture_output=True, text=True, timeout=60)


def test_the_reference_validator_accepts_every_skill():
    for skill_md in skill_mds():
        done = skills_ref_validate(skill_md.parent)
        assert done.returncode == 0 and "Valid skill" in done.stdout, (skill_md.parent.name, done.stdout + done.stderr)


def test_the_reference_validator_rejects_what_the_spec_forbids(tmp_path):
    # the check above is not vacuous: a renamed directory and an unknown frontmatter field both fail
    renamed = tmp_path / "Gradient_Health"
    shutil.copytree(SKILLS / "gradient-health", renamed)
    done = skills_ref_validate(renamed)
    assert done.returncode != 0 and "must match skill name" in done.stdout + done.stderr

    extra = tmp_path / "gradient-health"
    shutil.copytree(SKILLS / "gradient-health", extra)
    md = extra / "SKILL.md"
    md.write_text(md.read_text(encoding="utf-8").replace("---\n", "---\nversion: 2\n", 1), encoding="utf-8")
    done = skills_ref_validate(extra)
    assert done.returncode != 0 and "Unexpected fields in frontmatter: version" in done.stdout + done.stderr


def test_our_frontmatter_reader_agrees_with_the_strict_one():
    from server.skillpack import parse_frontmatter

    for p in skill_mds():
        text = p.read_text(encoding="utf-8")
        ours, _ = parse_frontmatter(text)
        assert ours == strict_frontmatter(split_frontmatter(text)[0])


@pytest.mark.parametrize("md", all_markdown(), ids=lambda p: str(p.relative_to(SKILLS)))
def test_relative_links_in_skills_resolve(md: Path):
    for target in re.findall(r"\]\(([^)#:]+\.md)\)", md.read_text(encoding="utf-8")):
        assert (md.parent / target).is_file(), f"{md}: broken link {target}"


def test_failure_mode_ids_in_skills_are_the_designed_ones():
    used = set()
    for md in all_markdown():
        text = md.read_text(encoding="utf-8")
        used |= set(re.findall(r'failure_mode="([a-z_]+)"', text))
        used |= {s for s in code_spans(text) if s in FAILURE_MODES}
    assert used, "skills name failure modes"
    assert used <= set(FAILURE_MODES), f"unknown failure modes: {used - set(FAILURE_MODES)}"
    journal_skill = (SKILLS / "fix-journal-and-regression-test" / "SKILL.md").read_text(encoding="utf-8")
    assert set(FAILURE_MODES) <= {s for s in code_spans(journal_skill)}, "the journal skill lists every id"


def test_thresholds_keep_their_sources():
    text = "\n".join(p.read_text(encoding="utf-8") for p in all_markdown())
    for source in ["Karpathy", "CS231n", "Full Stack Deep Learning", "Goodfellow", "Schulman", "Jones 2021",
                   "Rahtz 2018", "McCandlish", "Goyal et al. 2017", "Smith 2015", "Pascanu et al. 2013", "AUTOTRAINER",
                   "nn-zero-to-hero"]:
        assert source in text, f"{source} is not cited"
    for number in ["1e-3", "1e-5", "1e-1", "0.1-10", "70%", "3e-4", "2.303", "~40%", "|t| > 2"]:
        assert number in text, f"threshold {number} missing"


# --- skills <-> tools -----------------------------------------------------------------------


def test_every_tool_a_skill_calls_exists_on_the_server_and_every_tool_is_taught():
    tools = canonical_tools()
    mentioned: set[str] = set()
    for md in all_markdown():
        calls, bare = tool_mentions(md.read_text(encoding="utf-8"))
        unknown = calls - tools
        assert not unknown, f"{md.relative_to(REPO)} calls tools the server does not have: {sorted(unknown)}"
        mentioned |= calls | (bare & tools)
    untaught = tools - mentioned
    assert not untaught, f"server tools no skill mentions: {sorted(untaught)}"


def test_the_mention_detector_catches_drift():
    calls, bare = tool_mentions("run `tail_log(path=\"x\")`, then `gpu_status`, never `fancy_probe(x)` ```nope(1)```"
                                " with `StepLR(step_size=30)`")
    assert calls == {"tail_log", "fancy_probe"} and bare == {"gpu_status"}


def test_a_tool_called_anywhere_in_a_skill_exists_even_outside_backticks():
    """Prose and examples count too: 'call schedule_checks(...)' without backticks is still a call an agent makes."""
    tools = canonical_tools()
    for md in all_markdown():
        text = md.read_text(encoding="utf-8")
        called = {m.group(1) for m in re.finditer(SNAKE.pattern + r"\(", text)} - defined_names(text)
        assert called <= tools, f"{md.relative_to(REPO)} calls what the server does not have: {sorted(called - tools)}"


def test_no_skill_misspells_a_tool_name():
    tools = canonical_tools()
    for md in all_markdown():
        words = set(SNAKE.findall(md.read_text(encoding="utf-8"))) - tools
        near = {w: difflib.get_close_matches(w, tools, n=1, cutoff=0.8) for w in words}
        typos = {w: m[0] for w, m in near.items() if m}
        assert not typos, f"{md.relative_to(REPO)} names tools that do not exist (did you mean?): {typos}"


def test_every_tool_call_in_a_skill_uses_arguments_the_tool_accepts():
    schemas = live_tools()
    problems = []
    for md in all_markdown():
        for span in call_spans(md.read_text(encoding="utf-8")):
            if span.split("(", 1)[0] in schemas:
                problems += [f"{md.relative_to(REPO)}: {p}" for p in call_problems(span, schemas)]
    assert not problems, "\n".join(problems)


def test_the_argument_checker_catches_a_wrong_name_type_or_missing_argument():
    schemas = {"live_status": {"type": "object", "required": ["run"], "properties": {
        "run": {"type": "string"},
        "what": {"type": "array", "items": {"enum": ["progress", "stack"], "type": "string"}}}}}
    assert call_problems('live_status(run="<id>", what=["progress"])', schemas) == []
    assert call_problems('live_status(run="<id>", what=[...])', schemas) == []
    assert call_problems('live_status(...)', schemas) == []
    assert call_problems('live_status(run="<id>", what="progress")', schemas)  # a string where a list goes
    assert call_problems('live_status(run="<id>", what=["modulez"])', schemas)  # not one of the enum
    assert call_problems('live_status(run="<id>", wat=["progress"])', schemas)  # misspelled keyword
    assert call_problems('live_status(what=["stack"])', schemas)  # run is required
    assert call_problems('live_status(run=<id>, since=3)', schemas) == ["live_status() has no argument 'since'"]


# --- served over MCP, in process ------------------------------------------------------------


def test_every_skill_file_is_a_listable_markdown_resource_with_its_exact_bytes():
    files = {f"skill://{p.relative_to(SKILLS).as_posix()}": p for p in SKILLS.rglob("*") if p.is_file()}

    async def go():
        async with Client(server()) as c:
            listed = {r.uri: r for r in (await c.list_resources()).resources if r.uri.startswith("skill://")}
            assert set(listed) == set(files)
            for uri, path in files.items():
                assert listed[uri].mime_type == "text/markdown"
                contents = (await c.read_resource(uri)).contents[0]
                assert contents.text.encode() == path.read_bytes()
            main = listed["skill://gradient-health/SKILL.md"]
            assert main.name == "gradient-health" and "update/weight ratio" in main.description

    anyio.run(go)


def test_skills_extension_lists_frontmatter_and_digests_that_match_the_files():
    from server.skillpack import parse_frontmatter

    async def go():
        async with Client(server()) as c:
            assert "io.modelcontextprotocol/skills" in (c.server_capabilities.extensions or {})
            listing = await c.session.send_request(ListSkills(), ANY)
            assert listing["resultType"] == "complete" and listing["ttlMs"] > 0 and listing["cacheScope"]
            entries = {e["uri"]: e for e in listing["skills"]}
            assert set(entries) == {f"skill://{n}/SKILL.md" for n in EXPECTED_SKILLS}
            for uri, e in entries.items():
                name = uri.split("/")[2]
                assert e["frontmatter"] == parse_frontmatter((SKILLS / name / "SKILL.md").read_text())[0]
                assert e["frontmatter"]["name"] == name
                assert e["resources"][0]["uri"] == uri
                for r in e["resources"]:
                    raw = (SKILLS / r["uri"].removeprefix("skill://")).read_bytes()
                    assert r["digest"] == "sha256:" + hashlib.sha256(raw).hexdigest() and r["size"] == len(raw)
            got = await c.session.send_request(GetSkill(params=GetSkillParams(uri="skill://ml-training-triage/SKILL.md")), ANY)
            assert got["skill"] == entries["skill://ml-training-triage/SKILL.md"]
            assert {r["uri"] for r in got["skill"]["resources"]} >= {
                "skill://ml-training-triage/references/decision-tree.md"}
            with pytest.raises(MCPError) as err:
                await c.session.send_request(GetSkill(params=GetSkillParams(uri="skill://nope/SKILL.md")), ANY)
            assert err.value.code == -32602

    anyio.run(go)


def test_triage_prompt_embeds_the_triage_skill_and_names_the_evidence_calls_with_the_given_arguments():
    async def go():
        async with Client(server()) as c:
            r = await c.get_prompt("triage_training_failure", PROMPT_ARGS["triage_training_failure"])
            skill, plan = r.messages
            assert skill.content.resource.uri == "skill://ml-training-triage/SKILL.md"
            assert skill.content.resource.text == (SKILLS / "ml-training-triage" / "SKILL.md").read_text()
            text = plan.content.text
            for call in ['tail_log(path="logs/train.log"', 'log_metrics(path="logs/train.log"', "gpu_status()",
                         "process_check(", 'triage(target="train.py:make_target", log_path="logs/train.log"',
                         "journal_search("]:
                assert call in text
            assert "skill://nan-inf-hunting/SKILL.md" in text
            bare = await c.get_prompt("triage_training_failure", {"symptom": "run hangs after epoch 3"})
            assert "list_runs()" in bare.messages[1].content.text and "hangs-oom-throughput" in bare.messages[1].content.text

    anyio.run(go)


def test_after_fix_prompt_plans_compare_journal_and_test_and_refuses_unknown_failure_modes():
    async def go():
        async with Client(server()) as c:
            r = await c.get_prompt("after_fix", PROMPT_ARGS["after_fix"])
            assert r.messages[0].content.resource.uri == "skill://fix-journal-and-regression-test/SKILL.md"
            text = r.messages[1].content.text
            assert 'compare_runs(before="logs/before.log", after="logs/after.log"' in text
            assert 'write_regression_test(failure_mode="nan_inf", name="nan_from_log_0_in_the_entropy_bonus", function="model.py:entropy")' in text
            assert 'journal_append(title="NaN from log(0) in the entropy bonus", failure_mode="nan_inf"' in text
            # test first: the test written before the fix is re-run, and the re-run comes before the journal
            assert text.index("run_regression_test(") < text.index("compare_runs(") < text.index("journal_append(")
            with pytest.raises(MCPError, match="nan_inf"):
                await c.get_prompt("after_fix", {"title": "x", "failure_mode": "cosmic_rays"})

    anyio.run(go)


# --- served over MCP, for real over stdio ---------------------------------------------------


def test_a_stdio_client_lists_and_reads_every_skill_resource_and_gets_every_prompt(tmp_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "server", "--workspace", str(tmp_path)],
                                   cwd=str(REPO))
    files = {f"skill://{p.relative_to(SKILLS).as_posix()}": p for p in SKILLS.rglob("*") if p.is_file()}

    async def go():
        with anyio.fail_after(60):
            async with Client(params) as c:
                listed = {r.uri for r in (await c.list_resources()).resources if r.uri.startswith("skill://")}
                assert listed == set(files)
                for uri in sorted(listed):
                    assert (await c.read_resource(uri)).contents[0].text.encode() == files[uri].read_bytes()
                prompts = {p.name for p in (await c.list_prompts()).prompts}
                assert set(PROMPT_ARGS) <= prompts
                for name in prompts:
                    r = await c.get_prompt(name, PROMPT_ARGS.get(name, {}))
                    assert r.messages, name
                listing = await c.session.send_request(ListSkills(), ANY)
                assert len(listing["skills"]) == len(EXPECTED_SKILLS)

    anyio.run(go)


# --- the guidance the skills must carry (issues 13 and 14) ----------------------------------


def skill_text(name: str) -> str:
    return (SKILLS / name / "SKILL.md").read_text(encoding="utf-8")


def first(text: str, needle: str) -> int:
    i = text.find(needle)
    assert i >= 0, f"{needle!r} is missing"
    return i


def test_triage_workflow_writes_a_failing_test_before_the_fix_then_proves_it_then_journals():
    """Issue 14: a test written after the fix never proved it catches the bug; the journal cites the test."""
    text = skill_text("ml-training-triage")
    order = [first(text, s) for s in ("write_regression_test(", "fails_now", "run_regression_test(", "compare_runs(",
                                      "journal_append(")]
    assert order == sorted(order), "test first (fails_now), fix and re-run it, compare, then journal"
    step_test = first(text, "## Step 5")
    step_fix = first(text, "## Step 6")
    assert step_test < first(text, "write_regression_test(") < step_fix, "the test is written in the step before the fix"
    assert "BEFORE the fix" in text[step_test:step_fix] and "`fails_now: false`" in text[step_test:step_fix]
    assert "try_next" in text[step_test:step_fix], "a test that passes on the bug is sharpened, not accepted"
    assert re.search(r"`journal_append\([^`]*test_path=", text), "the journal entry cites the regression test"


def test_triage_compares_runs_on_the_metric_the_finding_is_about():
    text = skill_text("ml-training-triage")
    calls = [s for s in code_spans(text) if s.startswith("compare_runs(")]
    assert any('metric="val_loss"' in c for c in calls), "leakage/overfitting are judged on the held-out series"
    assert any('metric="loss"' in c for c in calls), "NaN/plateau are judged on the loss"
    assert "never a reason to\n   revert" in text or "never a reason to revert" in text


def test_triage_passes_both_target_and_command_and_routes_sequences_and_schedules():
    text = skill_text("ml-training-triage")
    assert any(s.startswith("triage(") and "target=" in s and "command=" in s for s in code_spans(text))
    spans = code_spans(text)
    assert any(s.startswith("sequence_check(target=") for s in spans)
    assert any(s.startswith("schedule_check(lr_schedule=") for s in spans)
    tree = text[first(text, "| # | Question"):first(text, "## Step 3")]
    assert "`sequence_check`" in tree and "`schedule_check`" in tree, "the decision tree routes to both checks"
    ref = (SKILLS / "ml-training-triage" / "references" / "decision-tree.md").read_text(encoding="utf-8")
    assert "sequence_check(target=T)" in ref and 'schedule_check(lr_schedule="train.py:get_lr")' in ref


def test_triage_treats_weak_findings_as_hypotheses_and_says_healthy():
    text = skill_text("ml-training-triage")
    assert re.search(r"below 0\.5\*\*: a hypothesis", text)
    assert "`healthy` on top" in text and "Do not invent a bug" in text
    lr_rule = text[first(text, "**LR findings**"):]
    lr_rule = lr_rule[:lr_rule.index("\n\n")]
    for needle in ("two independent signals", "steady state", "`lr_range_test`", "diverging"):
        assert needle in lr_rule, f"the LR rule lacks {needle!r}"


def test_curve_and_nan_skills_read_the_lr_series_before_anything_else():
    """Issue 14 (b): a NaN preceded by a climbing LR is a schedule bug; nan_hook_run alone named only the NaN."""
    nan = skill_text("nan-inf-hunting")
    assert first(nan, "schedule_check(") < first(nan, "nan_hook_run("), "the schedule is checked before the op hunt"
    assert re.search(r'log_metrics\([^`]*"lr"', nan)
    curve = skill_text("loss-curve-reading")
    assert first(curve, "## Read the LR series first") < first(curve, "## Shapes")
    for text in (nan, curve):
        for needle in ("warmup", "decay horizon", "per batch", "per epoch", "schedule_check(lr_schedule="):
            assert needle.lower() in text.lower().replace("per-", "per "), f"{needle!r} missing"
        assert re.search(r"NaN preceded by a climbing LR is a schedule bug|LR climbs into the NaN", text)


def test_curve_skill_does_not_call_fast_convergence_an_lr_problem_or_a_finished_log_a_hang():
    """Issue 13: a run that converged fast got lr_too_high 40%; a log that ended normally got 'hang 30%'."""
    curve = skill_text("loss-curve-reading")
    row = next(line for line in curve.splitlines() if line.startswith("| Fast convergence"))
    assert "Not an LR problem" in row and "validation" in row
    assert "A quiet log is not a hang" in curve and "`ended`" in curve and "`stalled`" in curve


def test_anti_patterns_cover_sequence_leakage_and_fixes_that_raise_train_loss():
    text = skill_text("training-anti-patterns")
    for needle in ("masked_fill", "Unshifted targets", "Teacher-forced validation", "sequence_check(target=",
                   "Reverting a correct fix because the training loss rose", "held-out",
                   "Adam's first steps or during warmup", "strongly predictive feature", "Kaufman et al. 2012"):
        assert needle in text, f"{needle!r} missing"
    revert = text[first(text, "## 15."):first(text, "## 16.")]
    assert "Never revert only because the\ntrain loss went up" in revert or "Never revert only because" in revert


def test_hang_is_judged_from_progress_not_from_a_wall_clock():
    """Issue 13: under load a healthy run was reported as 'hang' from a probe's wall clock."""
    text = skill_text("hangs-oom-throughput")
    hang = text[first(text, "## Hangs"):first(text, "## Slow throughput")]
    for needle in ("no optimizer step completes", "never from a wall clock", "load average", "`run_state`",
                   "`ended`", 'what=["progress"]', "stack=True", "twice"):
        assert needle in hang, f"{needle!r} missing"


def test_gradient_health_judges_update_ratios_in_steady_state_with_a_second_signal():
    """Issue 13: 'lr_too_high 55%' from a ratio of 0.16 measured at Adam's first step on a healthy transformer."""
    text = skill_text("gradient-health")
    assert 'grad_norm_snapshot(target="train.py:make_target", steps=12)' in text
    assert "Kingma & Ba 2015" in text and "steady state" in text and "two signals agree" in text
    assert "`steps=1` is enough for connectivity" in text
