"""Paths reached through real symlinks stay confined; special files are refused instead of hanging.

Every test has an `outside/` directory next to the workspace and checks it is untouched afterwards.
"""

import os
import sys

import anyio
import pytest

from conftest import run, stdio_client, text_of
from tools import live
from tools.errors import TriageError
from tools.workspace import Workspace, open_regular, walk


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("TOP-SECRET line\n")
    (d / "secret.py").write_text("password = 'TOP-SECRET'\n")
    return d


def listing(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_a_derived_directory_that_is_a_link_out_is_refused_and_nothing_is_created(workspace, outside):
    (workspace / "tests").symlink_to(outside, target_is_directory=True)
    before = listing(outside)
    with pytest.raises(TriageError, match="outside the write roots"):
        Workspace(workspace).directory("tests", create=True)
    with pytest.raises(TriageError, match="outside the write roots"):
        Workspace(workspace).write_path("tests/test_x.py")
    assert listing(outside) == before


def test_a_link_out_in_the_middle_of_a_derived_path_is_refused(workspace, outside):
    (workspace / ".mltriage").symlink_to(outside, target_is_directory=True)
    with pytest.raises(TriageError, match="outside the write roots"):
        Workspace(workspace).directory(".mltriage/runs", create=True)
    assert not (outside / "runs").exists()


def test_a_derived_directory_is_created_inside_the_workspace(workspace):
    d = Workspace(workspace).directory(".mltriage/runs", create=True, mode=0o700)
    assert d == (workspace / ".mltriage" / "runs").resolve() and d.is_dir()
    assert Workspace(workspace).directory(".mltriage/runs") == d  # exists now: found, not recreated
    (workspace / "afile").write_text("x")
    with pytest.raises(TriageError, match="not a directory"):
        Workspace(workspace).directory("afile")


def test_walk_skips_files_and_directories_that_link_out(workspace, outside):
    src = workspace / "src"
    src.mkdir()
    (src / "model.py").write_text("x = 1\n")
    (src / "leak.py").symlink_to(outside / "secret.py")
    (src / "vendored").symlink_to(outside, target_is_directory=True)
    (src / "alias.py").symlink_to(src / "model.py")  # a link that stays inside is fine
    (src / "dangling.py").symlink_to(workspace / "nowhere.py")
    os.mkfifo(src / "pipe.py")
    found = Workspace(workspace).walk("src", suffixes=(".py",))
    assert [p.name for p in found] == ["alias.py", "model.py"]
    assert [p.name for p in walk(src)] == ["alias.py", "model.py"]
    assert [p.name for p in walk(src, suffixes=(".txt",))] == []


def test_walk_of_a_folder_that_is_itself_a_link_out_finds_nothing(workspace, outside):
    (workspace / "sweep").symlink_to(outside, target_is_directory=True)
    with pytest.raises(TriageError, match="outside the read roots"):
        Workspace(workspace).walk("sweep")


def test_a_fifo_without_a_writer_is_refused_at_once_not_opened(workspace):
    os.mkfifo(workspace / "train.log")
    ws = Workspace(workspace)
    with pytest.raises(TriageError, match="FIFO"):
        ws.existing_file("train.log")
    with pytest.raises(TriageError, match="FIFO"):
        open_regular(workspace / "train.log")  # O_NONBLOCK: even the open cannot hang
    with pytest.raises(TriageError, match="FIFO"):
        ws.write_path("train.log")


def test_a_device_node_linked_into_the_workspace_is_refused(workspace):
    (workspace / "zeros.log").symlink_to("/dev/zero")
    with pytest.raises(TriageError):  # outside the workspace, and a device anyway
        Workspace(workspace).existing_file("zeros.log")
    with pytest.raises(TriageError, match="character device"):
        open_regular(workspace / "zeros.log")


def test_a_symlink_loop_and_an_overlong_path_are_errors_an_agent_can_read(workspace):
    (workspace / "a.log").symlink_to(workspace / "b.log")
    (workspace / "b.log").symlink_to(workspace / "a.log")
    ws = Workspace(workspace)
    with pytest.raises(TriageError, match="symlink loop"):
        ws.existing_file("a.log")
    with pytest.raises(TriageError, match="too long") as info:
        ws.existing_file("x" * 100_000)
    assert len(str(info.value)) < 1000, "the rejected path is quoted, not echoed whole"


def test_run_training_refuses_a_runs_directory_that_links_out(workspace, outside):
    (workspace / ".mltriage").mkdir()
    (workspace / ".mltriage" / "runs").symlink_to(outside, target_is_directory=True)
    (workspace / "train.py").write_text("print('hi')\n")
    before = listing(outside)
    mode = outside.stat().st_mode
    with pytest.raises(TriageError, match="outside the write roots"):
        live.launch(workspace, [sys.executable, "train.py"], workspace / "logs" / "train.log")
    assert listing(outside) == before and outside.stat().st_mode == mode, "no run dir, no chmod outside"
    with pytest.raises(TriageError, match="outside the write roots"):
        live.list_runs(workspace)


def test_a_linked_run_directory_is_not_a_run(workspace, outside):
    (outside / "state.json").write_text('{"id": "evil-0101-000000-abcd", "log_path": "/etc/passwd", "created": 0}')
    runs = workspace / ".mltriage" / "runs"
    runs.mkdir(parents=True)
    (runs / "evil-0101-000000-abcd").symlink_to(outside, target_is_directory=True)
    assert live.list_runs(workspace).runs == []
    with pytest.raises(TriageError, match="no run"):
        live.run_dir(workspace, "evil-0101-000000-abcd")


def test_a_directory_as_log_path_fails_before_any_run_exists(workspace):
    (workspace / "train.py").write_text("print('hi')\n")
    (workspace / "logs").mkdir()
    with pytest.raises(TriageError, match="is a directory"):
        live.launch(workspace, [sys.executable, "train.py"], workspace / "logs")
    assert live.list_runs(workspace).runs == []
    runs = workspace / ".mltriage" / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


def test_over_stdio_links_fifos_and_loops_get_clear_tool_errors(workspace, outside, no_stray_processes):
    os.mkfifo(workspace / "pipe.log")
    (workspace / "loop.log").symlink_to(workspace / "loop.log")
    (workspace / "leak.log").symlink_to(outside / "secret.txt")
    (workspace / ".mltriage").symlink_to(outside, target_is_directory=True)
    (workspace / "train.py").write_text("print('hi')\n")
    before = listing(outside)

    async def body():
        with anyio.fail_after(120):
            async with stdio_client(workspace) as c:
                return {
                    "fifo": await c.call_tool("tail_log", {"path": "pipe.log"}),
                    "loop": await c.call_tool("tail_log", {"path": "loop.log"}),
                    "leak": await c.call_tool("tail_log", {"path": "leak.log"}),
                    "long": await c.call_tool("tail_log", {"path": "y" * 5000}),
                    "run": await c.call_tool("run_training", {"command": ["python", "train.py"],
                                                              "log_path": "train.log"}),
                }

    r = run(body)
    assert all(x.is_error for x in r.values()), {k: text_of(v) for k, v in r.items() if not v.is_error}
    assert "FIFO" in text_of(r["fifo"])
    assert "symlink loop" in text_of(r["loop"])
    assert "outside" in text_of(r["leak"]) and "TOP-SECRET" not in text_of(r["leak"])
    assert "too long" in text_of(r["long"])
    assert "outside" in text_of(r["run"])
    assert listing(outside) == before


def test_write_regression_test_refuses_a_tests_directory_that_links_out(workspace, outside):
    from tools.regression import write_regression_test

    (workspace / "train.py").write_text("def get_lr(it):\n    return 0.1\n")
    (workspace / "tests").symlink_to(outside, target_is_directory=True)
    before = listing(outside)
    with pytest.raises(TriageError, match="outside the write roots"):
        run(lambda: write_regression_test(workspace_root=workspace, failure_mode="lr_too_high",
                                          function="train.py:get_lr", function_file=workspace / "train.py"))
    assert listing(outside) == before
