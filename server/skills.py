"""Skills over MCP: every skill file as a `skill://` resource, the SEP-2640 skills extension, and prompts.

The skills themselves are markdown in `skills/<name>/` (Agent Skills format, read by
server/skillpack.py); this module serves them. The same folder is what `mltriage install`
copies into Claude Code, Gemini CLI, Cursor and VS Code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.mcpserver.resources import Resource
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, EmbeddedResource, TextResourceContents

from server.core import mcp
from server.skillpack import EXTENSION_ID, MIME, Skill, discover, skill_text
from server.skills_extension import SkillsExtension
from tools.failure_modes import FAILURE_MODES


# --- resources ------------------------------------------------------------------------------


class SkillFileResource(Resource):
    """A skill file read from disk on every read, so the bytes always match the published digest."""

    path: Path

    async def read(self) -> str:
        return self.path.read_bytes().decode("utf-8")


def _register_resources(skills: list[Skill]) -> None:
    for skill in skills:
        for f in skill.files:
            is_main = f.rel == "SKILL.md"
            mcp.add_resource(SkillFileResource(
                uri=f.uri,
                name=skill.name if is_main else f"{skill.name}/{f.rel}",
                description=skill.frontmatter.get("description") if is_main else f"Reference for the {skill.name} skill",
                mime_type=MIME if f.path.suffix == ".md" else "text/plain",
                path=f.path,
            ))


def _install_extension() -> None:
    # MCPServer takes extensions only at construction (`MCPServer(extensions=[...])`) and the
    # server is built in server/core.py; `_apply_extension` is the SDK's own path for exactly this
    # (validation, method registration, capability advertisement). If core.py ever passes
    # `extensions=[SkillsExtension()]` itself, leave it alone.
    if EXTENSION_ID not in mcp._lowlevel_server.extensions:  # noqa: SLF001
        mcp._apply_extension(SkillsExtension())  # noqa: SLF001


# --- prompts --------------------------------------------------------------------------------

# Which specialised skill to read next, by words in the reported symptom.
_SYMPTOM_SKILLS = [
    (("rank", "distributed", "ddp", "torchrun", "slurm", "collective", "watchdog", "straggler", "nccl", "gloo"),
     "distributed-failures"),
    (("nan", "inf", "overflow"), "nan-inf-hunting"),
    (("oom", "out of memory", "memory", "hang", "stuck process", "freez", "slow", "throughput", "nccl", "deadlock"), "hangs-oom-throughput"),
    (("explod", "vanish", "gradient", "grad norm", "not learning", "stuck", "plateau", "flat", "dead"), "gradient-health"),
    (("curve", "oscillat", "spike", "diverg", "hockey"), "loss-curve-reading"),
    (("metric", "accuracy", "f1", "reward", "won't move", "wont move"), "metric-wont-move"),
    (("sweep", "seed", "ablation", "compare"), "experiment-sweeps"),
    (("overfit", "validation", "val loss", "leak", "data"), "training-folklore-priors"),
]


def _q(value: str) -> str:
    return json.dumps(value)


def _embedded(name: str) -> UserMessage:
    return UserMessage(EmbeddedResource(
        type="resource",
        resource=TextResourceContents(uri=f"skill://{name}/SKILL.md", mime_type=MIME, text=skill_text(name)),
    ))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:60] or "regression"


@mcp.prompt(title="Triage a failing training run")
def triage_training_failure(symptom: str, log_path: str | None = None, target: str | None = None) -> list[UserMessage]:
    """Start debugging a failing PyTorch run: the triage skill plus the evidence to gather first, in order."""
    steps = [f"1. `journal_search(query={_q(symptom[:80])})`: has this happened before?"]
    if log_path:
        steps += [
            f"2. `tail_log(path={_q(log_path)}, lines=200)`: traceback, NaN/OOM/NCCL events, last step, staleness.",
            f"3. `log_metrics(path={_q(log_path)}, plot=True)`: the curve shape and non-finite counts "
            "(`plot=False` if you cannot see images).",
        ]
    else:
        steps += [
            "2. No log given: `list_runs()` for runs launched through mltriage; otherwise ask the user for the "
            "log path or the training command, and the symptom menu in "
            "skill://ml-training-triage/references/symptom-menu.md.",
            "3. Once a log exists: `tail_log(path=...)` then `log_metrics(path=...)`.",
        ]
    steps += [
        "4. `gpu_status()` and `process_check(pattern=\"train\")` (add `stack=True` with the pid if the verdict "
        "is `possibly_hung`).",
    ]
    args = []
    if target:
        args.append(f"target={_q(target)}")
    if log_path:
        args.append(f"log_path={_q(log_path)}")
    if target:
        steps.append(
            f"5. `triage({', '.join(args)}, command=[\"python\", \"train.py\", ...the user's own command...], "
            "source_paths=[...the training and model files...])`: static scan, the log, the factory probes and the "
            "user's own script run for a bounded number of steps; read its ranked findings and next_steps."
        )
    else:
        steps.append(
            "5. `static_scan(paths=[...the training and model files...])`, then walk the decision tree by hand; "
            "for the probes write a no-argument `make_target()` factory (model, batch, loss_fn) or pass "
            "`command=[...]`, then `triage(...)`."
        )
    lowered = symptom.lower()
    specific = next((skill for words, skill in _SYMPTOM_SKILLS if any(w in lowered for w in words)), None)
    plan = "\n".join([
        f"A PyTorch training run is failing. Reported symptom: {symptom}",
        "",
        "Follow the ml-training-triage skill above. Gather this evidence before proposing any change:",
        *steps,
        "",
        "Then classify with the decision tree (stop at the first match), localise with the probe it names, and "
        "state ranked hypotheses: most likely (~80%), alternative (~15%), also consider (~5%), each with measured "
        "evidence and a concrete fix. Do not change hyperparameters, switch optimizers or add try/except before "
        "the probes have ruled out a bug (skill://training-anti-patterns/SKILL.md).",
        *([f"The symptom suggests reading skill://{specific}/SKILL.md next."] if specific else []),
        "Before changing any code, write the regression test (`write_regression_test`, the call triage's next_steps "
        "suggests): `fails_now` must be true on the current code; if it passes, it does not catch the bug: sharpen "
        "it first. Then fix, and use the after_fix prompt: re-run the test, compare runs, journal entry.",
    ])
    return [_embedded("ml-training-triage"), UserMessage(plan)]


@mcp.prompt(title="Record a fix: journal entry and regression test")
def after_fix(
    title: str,
    failure_mode: str,
    symptom: str = "",
    root_cause: str = "",
    fix: str = "",
    evidence: str | None = None,
    before_log: str | None = None,
    after_log: str | None = None,
    target: str | None = None,
    function: str | None = None,
) -> list[UserMessage]:
    """After the fix: re-run the regression test written before it, compare before/after, append the journal entry."""
    if failure_mode not in FAILURE_MODES:
        # MCPError is the only prompt exception whose message reaches the client.
        raise MCPError(INVALID_PARAMS, f"unknown failure_mode {failure_mode!r}; use one of: {', '.join(FAILURE_MODES)}")
    name = _slug(title)
    test_args = [f"failure_mode={_q(failure_mode)}", f"name={_q(name)}"]
    if target:
        test_args.append(f"target={_q(target)}")
    if function:
        test_args.append(f"function={_q(function)}")
    steps = [f"`run_regression_test(path=\"tests/test_{name}.py\")` (the test you wrote BEFORE the fix, when it "
             "failed): `passes_now` must be true now. If you did not write it first, call "
             f"`write_regression_test({', '.join(test_args)})` on the code with the fix reverted (it must fail), "
             "then restore the fix and re-run it. Never loosen a bound to make it pass."]
    if before_log and after_log:
        held_out = failure_mode in ("data_leakage", "overfitting")
        metric = "val_loss" if held_out else "loss"
        steps.append(f"`compare_runs(before={_q(before_log)}, after={_q(after_log)}, metric=\"{metric}\")`: the "
                     "verdict and numbers become the entry's resolution."
                     + (" Removing a leak makes TRAIN loss rise: judge by the held-out series, never revert for that."
                        if held_out else " Stop and rethink if it is not `improved`."))
    journal_args = ", ".join([
        f"title={_q(title)}", f"failure_mode={_q(failure_mode)}",
        f"symptom={_q(symptom or '<symptom with numbers>')}",
        f"root_cause={_q(root_cause or '<the mechanism>')}",
        f"fix={_q(fix or '<file:line and the change>')}",
        f"evidence={_q(evidence or '<measured numbers and the tool that measured them>')}",
        "resolution=\"<before/after numbers>\"",
        f"test_path=\"tests/test_{name}.py\"",
    ])
    steps += [
        f"`journal_append({journal_args})`: fill every placeholder with measured values; set test_path to the "
        "path write_regression_test reported.",
    ]
    plan = "\n".join([
        f"The fix for '{title}' ({failure_mode}: {FAILURE_MODES[failure_mode][0]}) is in. Finish it as the "
        "fix-journal-and-regression-test skill above says:",
        *[f"{i}. {s}" for i, s in enumerate(steps, 1)],
        "A bug without a journal entry and a regression test is not fixed.",
    ])
    return [_embedded("fix-journal-and-regression-test"), UserMessage(plan)]


@mcp.prompt(title="Load an mltriage skill")
def use_skill(name: str) -> list[UserMessage]:
    """Load one mltriage skill (for clients without the skills extension). Names: see skill:// resources."""
    names = [s.name for s in discover()]
    if name not in names:
        raise MCPError(INVALID_PARAMS, f"unknown skill {name!r}; available: {', '.join(names)}")
    return [_embedded(name)]


_register_resources(discover())
_install_extension()


# --- prompt errors ---------------------------------------------------------------------------
_sdk_get_prompt = mcp.get_prompt


async def _get_prompt(name: str, arguments: dict | None = None, context=None):
    """The SDK rejects an unknown prompt or a missing argument with a plain ValueError, which reaches
    the client as error code 0; the spec asks for -32602 (invalid params), so decide those here."""
    prompts = await mcp.list_prompts()
    prompt = next((p for p in prompts if p.name == name), None)
    if prompt is None:
        raise MCPError(INVALID_PARAMS, f"unknown prompt {name!r}; available: {', '.join(p.name for p in prompts)}")
    missing = [a.name for a in prompt.arguments or [] if a.required and a.name not in (arguments or {})]
    if missing:
        raise MCPError(INVALID_PARAMS, f"prompt {name!r} needs the argument(s): {', '.join(missing)}")
    return await _sdk_get_prompt(name, arguments, context)


mcp.get_prompt = _get_prompt  # the SDK's handler looks the method up on the instance
