"""The journal and regression-test tools over a real MCP stdio session against `python -m server`."""

import shutil

from _shared_threads import ONE_THREAD  # the server hands it to the pytest runs it starts
from conftest import EXAMPLES, run, stdio_client, text_of


def test_test_written_before_the_fix_fails_then_passes_after_it_and_the_journal_cites_it(workspace, no_stray_processes):
    shutil.copytree(EXAMPLES / "nan_div_zero", workspace / "nan_div_zero")
    train = workspace / "nan_div_zero" / "train.py"
    (workspace / "journal.md").write_text("# notes\nkeep me")

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as client:
            before = await client.call_tool("journal_search", {"query": "std epsilon"})
            assert not before.is_error and before.structured_content["entries"] == []

            args = {"failure_mode": "nan_inf", "name": "standardize stays finite",
                    "function": "nan_div_zero/train.py:Standardize", "params": {"edge_inputs": ["constant_rows"]}}
            broken = await client.call_tool("write_regression_test", args)
            assert not broken.is_error, text_of(broken)
            report = broken.structured_content
            assert (report["status"], report["fails_now"], report["catches_bug"]) == ("failed", True, True)
            assert "NaN/Inf" in report["failure_message"] and text_of(broken).startswith(
                "tests/test_standardize_stays_finite.py: catches the bug")

            shutil.copy(train.parent / "train_fixed.py", train)
            fixed = await client.call_tool("run_regression_test", {"path": report["path"]})
            assert not fixed.is_error, text_of(fixed)
            assert (fixed.structured_content["passes_now"], fixed.structured_content["template"]) == (
                True, "nan_inf_function")

            entry = await client.call_tool("journal_append", {
                "title": "NaN loss on step 0 from constant sensor rows", "failure_mode": "nan_inf",
                "symptom": "loss NaN at step 0", "root_cause": "x.std() is 0 on stuck-sensor rows: 0/0",
                "fix": "nan_div_zero/train.py:30 add 1e-5 to the std", "evidence": ["nan_hook_run: Standardize output"],
                "test_path": report["path"], "tags": ["nan", "std", "epsilon"]})
            assert not entry.is_error, text_of(entry)
            anchor = entry.structured_content["anchor"]

            found = await client.call_tool("journal_search", {"query": "std epsilon", "failure_mode": "nan_inf"})
            [record] = found.structured_content["entries"]
            assert record["anchor"] == anchor and record["test_path"] == "tests/test_standardize_stays_finite.py"

            # written after the fix, the same test passes at once: the tool says plainly it proves nothing
            late = await client.call_tool("write_regression_test", args)
            late_report = late.structured_content
            assert (late_report["path"], late_report["fails_now"]) == ("tests/test_standardize_stays_finite_2.py", False)
            assert "DOES NOT CATCH THE BUG" in text_of(late) and late_report["try_next"]

            outside = await client.call_tool("journal_append", {
                "title": "t", "failure_mode": "nan_inf", "symptom": "s", "root_cause": "r", "fix": "f",
                "path": "../escaped.md"})
            assert outside.is_error and "outside the write roots" in text_of(outside)
            bad = await client.call_tool("write_regression_test", {"failure_mode": "nan_inf", "name": "../x",
                                                                   "function": "nan_div_zero/train.py:Standardize"})
            assert bad.is_error and "path separator" in text_of(bad)
            escape = await client.call_tool("run_regression_test", {"path": "../elsewhere/test_x.py"})
            assert escape.is_error and "outside" in text_of(escape)

    run(body)
    assert (workspace / "journal.md").read_text().startswith("# notes\nkeep me\n\n<a id=")
    assert not (workspace.parent / "escaped.md").exists()
    assert sorted(p.name for p in (workspace / "tests").iterdir()) == [
        "test_standardize_stays_finite.py", "test_standardize_stays_finite_2.py"]


def test_script_mode_test_over_stdio_catches_a_loop_bug(workspace, no_stray_processes):
    # the bug lives only in the loop (main() never calls zero_grad): the test runs the user's script itself
    shutil.copytree(EXAMPLES / "missing_zero_grad", workspace, dirs_exist_ok=True)

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as client:
            broken = await client.call_tool("write_regression_test", {
                "failure_mode": "missing_zero_grad", "command": ["python", "train.py", "--steps", "30"],
                "params": {"steps": 10}})
            assert not broken.is_error, text_of(broken)
            report = broken.structured_content
            assert report["catches_bug"] and report["template"] == "script", text_of(broken)
            assert "previous step's gradients still in .grad" in report["failure_message"]
            shutil.copy(workspace / "train_fixed.py", workspace / "train.py")
            fixed = await client.call_tool("run_regression_test", {"path": report["path"]})
            assert fixed.structured_content["passes_now"], text_of(fixed)

    run(body)


def test_the_padding_test_over_stdio_catches_a_gru_read_at_its_padded_last_step_and_the_fix_passes(
        workspace, no_stray_processes):
    """Dev call_intent_gru_last_pad with the template triage's next step names (template='padding': no training)."""
    shutil.copytree(EXAMPLES / "realistic" / "rnn_seq" / "call_intent_gru_last_pad", workspace, dirs_exist_ok=True)

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as client:
            args = {"failure_mode": "data_pipeline", "target": "train.py:make_target", "template": "padding"}
            broken = await client.call_tool("write_regression_test", args)
            report = broken.structured_content
            assert report["catches_bug"] and report["template"] == "padding", text_of(broken)
            assert "moved their outputs by 0.551x" in report["failure_message"]
            no_target = await client.call_tool("write_regression_test", {**args, "target": None, "name": "x"})
            assert no_target.is_error and "padding template needs target=" in text_of(no_target)
            shutil.copy(workspace / "train_fixed.py", workspace / "train.py")
            fixed = await client.call_tool("run_regression_test", {"path": report["path"]})
            assert fixed.structured_content["passes_now"], text_of(fixed)

    run(body)


def test_the_rows_test_over_stdio_catches_features_dropped_apart_from_their_labels_and_the_fix_passes(
        workspace, no_stray_processes):
    """Dev turbine_vib_dropna_shift (rows with a missing reading dropped from the features only) with the template
    triage's next step names for it (template='rows': the tables coded by row id, no training)."""
    shutil.copytree(EXAMPLES / "realistic" / "tabular" / "turbine_vib_dropna_shift", workspace, dirs_exist_ok=True)

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as client:
            args = {"failure_mode": "data_pipeline", "target": "train.py:make_target", "template": "rows"}
            broken = await client.call_tool("write_regression_test", args)
            report = broken.structured_content
            assert report["catches_bug"] and report["template"] == "rows", text_of(broken)
            assert "are paired by position" in report["failure_message"], report["failure_message"]
            # named after the check, and the failure says where the table was read
            assert report["path"] == "tests/test_rows_keep_their_labels.py", report["path"]
            assert "turbine_log.csv at train.py:23" in report["failure_message"], report["failure_message"]
            shutil.copy(workspace / "train_fixed.py", workspace / "train.py")
            fixed = await client.call_tool("run_regression_test", {"path": report["path"]})
            assert fixed.structured_content["passes_now"], text_of(fixed)

    run(body)


SPLITS = '''
import torch
from torch import nn
import torch.nn.functional as F

MAP_VAL_LIKE_TRAIN = MAPPED


def table(seed, n=512):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 8, generator=g) * 0.5
    x[torch.arange(n), y] += 2.0  # the class shows in its own column
    return x, y


def make_target():
    torch.manual_seed(0)
    x, y = table(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    return {"model": model, "data": list(zip(x.split(64), y.split(64))),
            "loss_fn": lambda m, b: F.cross_entropy(m(b[0]), b[1]),
            "make_optimizer": lambda p: torch.optim.Adam(p, lr=1e-2)}


def val_batches():
    x, y = table(1)
    if not MAP_VAL_LIKE_TRAIN:
        y = (y + 1) % 4  # the validation file's own class-id map
    return x, y
'''


def test_a_validation_set_built_apart_is_caught_over_stdio_and_a_missing_function_is_an_error(
        workspace, no_stray_processes):
    """function= hands the data_pipeline test the validation data the target does not carry."""
    train = workspace / "train.py"
    train.write_text(SPLITS.replace("MAPPED", "False"))

    async def body():
        async with stdio_client(workspace, env=ONE_THREAD) as client:
            args = {"failure_mode": "data_pipeline", "name": "validation matches training",
                    "target": "train.py:make_target", "function": "train.py:val_batches"}
            broken = await client.call_tool("write_regression_test", args)
            report = broken.structured_content
            assert report["catches_bug"] and "validation_data" in report["template"], text_of(broken)
            assert "does not hold on the validation data" in report["failure_message"]
            train.write_text(SPLITS.replace("MAPPED", "True"))
            fixed = await client.call_tool("run_regression_test", {"path": report["path"]})
            assert fixed.structured_content["passes_now"], text_of(fixed)

            missing = await client.call_tool("write_regression_test", {**args, "name": "missing",
                                                                       "function": "train.py:no_such"})
            assert missing.is_error and "no_such" in text_of(missing)
            alive = await client.call_tool("journal_search", {"query": "anything"})
            assert not alive.is_error

    run(body)
    assert sorted(p.name for p in (workspace / "tests").iterdir() if p.suffix == ".py") == [
        "test_validation_matches_training.py"]
