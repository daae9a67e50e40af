"""The human CLI: one generated subcommand per tool, the same answers as over MCP."""

import json
import subprocess
import sys

from conftest import ROOT


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "server", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_every_tool_is_a_subcommand(workspace):
    r = _cli("--help", cwd=workspace)
    assert r.returncode == 0
    for name in ("tail_log", "log_metrics", "triage", "static_scan", "journal_append", "live_status", "profile_steps"):
        assert name in r.stdout


def test_tail_log_subcommand_prints_the_summary_or_the_json_report(workspace):
    (workspace / "train.log").write_text("step 1 | loss 2.30\nstep 2 | loss nan\n")
    human = _cli("tail_log", "--path", "train.log", "--workspace", str(workspace), cwd=workspace)
    assert human.returncode == 0 and "last step 2" in human.stdout and "nan_inf" in human.stdout
    machine = _cli("tail_log", "--path", "train.log", "--json", "--workspace", str(workspace), cwd=workspace)
    report = json.loads(machine.stdout)
    assert report["last_step"] == 2 and any(e["kind"] == "nan_inf" for e in report["events"])


def test_a_path_outside_the_workspace_fails_with_the_reason_and_exit_code_1(workspace, tmp_path):
    (tmp_path / "secret.log").write_text("step 1 | loss 1\n")
    r = _cli("tail_log", "--path", "../secret.log", "--workspace", str(workspace), cwd=workspace)
    assert r.returncode == 1
    assert "outside the read roots" in r.stdout and "--allow-read" in r.stdout
    assert r.stderr.count("outside the read roots") == 0  # said once, not again by the SDK's log
