"""The journal tools over a real MCP stdio session against `python -m server`."""

import shutil

from conftest import EXAMPLES, run, stdio_client, text_of


def test_fix_is_journaled_and_its_regression_test_fails_on_the_bug_then_passes(workspace, no_stray_processes):
    shutil.copytree(EXAMPLES / "nan_div_zero", workspace / "nan_div_zero")
    train = workspace / "nan_div_zero" / "train.py"
    (workspace / "journal.md").write_text("# notes\nkeep me")

    async def body():
        async with stdio_client(workspace) as client:
            before = await client.call_tool("journal_search", {"query": "std epsilon"})
            assert not before.is_error and before.structured_content["entries"] == []

            args = {"failure_mode": "nan_inf", "name": "standardize stays finite",
                    "function": "nan_div_zero/train.py:Standardize", "params": {"edge_inputs": ["constant_rows"]}}
            broken = await client.call_tool("write_regression_test", args)
            assert not broken.is_error, text_of(broken)
            assert broken.structured_content["status"] == "failed"
            assert "NaN/Inf" in text_of(broken)

            shutil.copy(train.parent / "train_fixed.py", train)
            fixed = await client.call_tool("write_regression_test", args)
            report = fixed.structured_content
            assert (report["status"], report["path"]) == ("passed", "tests/test_standardize_stays_finite_2.py")

            entry = await client.call_tool("journal_append", {
                "title": "NaN loss on step 0 from constant sensor rows", "failure_mode": "nan_inf",
                "symptom": "loss NaN at step 0", "root_cause": "x.std() is 0 on stuck-sensor rows: 0/0",
                "fix": "nan_div_zero/train.py:30 add 1e-5 to the std", "evidence": ["nan_hook_run: Standardize output"],
                "test_path": report["path"], "tags": ["nan", "std", "epsilon"]})
            assert not entry.is_error, text_of(entry)
            anchor = entry.structured_content["anchor"]

            found = await client.call_tool("journal_search", {"query": "std epsilon", "failure_mode": "nan_inf"})
            [record] = found.structured_content["entries"]
            assert record["anchor"] == anchor and record["test_path"] == "tests/test_standardize_stays_finite_2.py"

            outside = await client.call_tool("journal_append", {
                "title": "t", "failure_mode": "nan_inf", "symptom": "s", "root_cause": "r", "fix": "f",
                "path": "../escaped.md"})
            assert outside.is_error and "outside the write roots" in text_of(outside)
            bad = await client.call_tool("write_regression_test", {"failure_mode": "nan_inf", "name": "../x",
                                                                   "function": "nan_div_zero/train.py:Standardize"})
            assert bad.is_error and "path separator" in text_of(bad)

    run(body)
    assert (workspace / "journal.md").read_text().startswith("# notes\nkeep me\n\n<a id=")
    assert not (workspace.parent / "escaped.md").exists()
    assert sorted(p.name for p in (workspace / "tests").iterdir()) == [
        "test_standardize_stays_finite.py", "test_standardize_stays_finite_2.py"]
