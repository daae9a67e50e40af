"""The probe runner: the user's interpreter, a process group killed whole, results and rank reports read back."""

import sys
import textwrap

import pytest

from conftest import run
from tools.errors import TriageError
from tools.probe_runner import choose_python, run_probe


def _script(ws, name, body):
    p = ws / name
    p.write_text(textwrap.dedent(body))
    return p


def test_a_hung_command_and_its_children_are_killed_at_the_timeout(workspace, no_stray_processes):
    _script(workspace, "hang.py", """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        time.sleep(600)
    """)

    async def body():
        return await run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=1.5,
                               command=[sys.executable, "hang.py"])

    oc = run(body)
    assert oc.timed_out and oc.result is None
    assert "killed with its process group" in oc.failure()


def test_a_segfault_is_reported_as_a_signal_not_a_hang(workspace, no_stray_processes):
    _script(workspace, "crash.py", "import ctypes\nctypes.string_at(0)\n")

    async def body():
        return await run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=30,
                               command=[sys.executable, "crash.py"])

    oc = run(body)
    assert oc.crashed_by == "SIGSEGV"
    assert "SIGSEGV" in oc.failure()


def test_rank_reports_and_progress_come_back_from_the_job_directory(workspace):
    _script(workspace, "ranks.py", """
        import json, os
        job = os.environ["MLTRIAGE_JOB"]
        for r in (0, 1):
            json.dump({"rank": r}, open(os.path.join(job, "reports", f"rank{r}.json"), "w"))
        with open(os.path.join(job, "progress.jsonl"), "a") as f:
            f.write(json.dumps({"progress": 1, "total": 2, "message": "half"}) + "\\n")
    """)
    seen = []

    async def progress(p, total=None, message=None):
        seen.append((p, total, message))

    async def body():
        return await run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=30, on_progress=progress,
                               command=[sys.executable, "ranks.py"])

    oc = run(body)
    assert oc.reports == {"rank0": {"rank": 0}, "rank1": {"rank": 1}}
    assert seen == [(1.0, 2, "half")]


def test_a_python_that_does_not_exist_is_a_clear_error(workspace):
    with pytest.raises(TriageError, match="was not found"):
        choose_python("/nonexistent/bin/python", workspace)


def test_the_workspace_venv_is_the_default_interpreter(workspace):
    venv = workspace / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    assert choose_python(None, workspace) == str(venv / "python")
