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


# --- nothing a probe starts outlives it --------------------------------------------------------------

DOUBLE_FORK = """
    import os, sys, time
    pidfile = sys.argv[1]
    if os.fork() == 0:            # the classic daemon: fork, setsid, fork again, parent exits
        os.setsid()
        if os.fork() == 0:
            with open(pidfile + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(pidfile + ".tmp", pidfile)
            time.sleep(600)
        os._exit(0)
    while not os.path.exists(pidfile):
        time.sleep(0.02)
    {after}
"""

SETSID_CHILD = """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    with open(sys.argv[1], "w") as f:
        f.write(str(child.pid))
    {after}
"""


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pid(path) -> int:
    return int(path.read_text())


@pytest.mark.parametrize("script", [DOUBLE_FORK, SETSID_CHILD], ids=["double-forked daemon", "setsid child"])
def test_a_probe_that_ends_normally_leaves_no_daemon_or_setsid_child(script, workspace, tmp_path, no_stray_processes):
    _script(workspace, "spawn.py", script.format(after="print('done')"))
    pidfile = tmp_path / "escaped.pid"

    async def body():
        return await run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=60,
                               command=[sys.executable, "spawn.py", str(pidfile)])

    oc = run(body)
    assert oc.returncode == 0 and not oc.timed_out, oc.stderr_tail
    assert not _alive(_pid(pidfile)), "the escaped process outlived the probe"


@pytest.mark.parametrize("script", [DOUBLE_FORK, SETSID_CHILD], ids=["double-forked daemon", "setsid child"])
def test_a_probe_killed_at_its_timeout_takes_its_daemons_along(script, workspace, tmp_path, no_stray_processes):
    _script(workspace, "spawn.py", script.format(after="time.sleep(600)"))
    pidfile = tmp_path / "escaped.pid"

    async def body():
        return await run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=3,
                               command=[sys.executable, "spawn.py", str(pidfile)])

    oc = run(body)
    assert oc.timed_out
    assert not _alive(_pid(pidfile))


def test_a_cancelled_probe_takes_its_daemon_along(workspace, tmp_path, no_stray_processes):
    import anyio

    _script(workspace, "spawn.py", DOUBLE_FORK.format(after="time.sleep(600)"))
    pidfile = tmp_path / "escaped.pid"

    async def body():
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=120,
                                                command=[sys.executable, "spawn.py", str(pidfile)]))
                while not pidfile.exists():
                    await anyio.sleep(0.05)
                tg.cancel_scope.cancel()  # as a client's notifications/cancelled does
        return scope.cancelled_caught

    assert run(body) is False, "the daemon never started"
    assert not _alive(_pid(pidfile))


def test_an_unmarked_process_of_the_same_user_is_left_alone(workspace, tmp_path, no_stray_processes):
    import subprocess

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        _script(workspace, "spawn.py", SETSID_CHILD.format(after="print('done')"))

        async def body():
            return await run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=60,
                                   command=[sys.executable, "spawn.py", str(tmp_path / "escaped.pid")])

        run(body)
        assert bystander.poll() is None, "a process the probe did not start was killed"
    finally:
        bystander.kill()
        bystander.wait()


def test_probes_run_side_by_side_share_the_cores_and_the_users_setting_wins(workspace, monkeypatch):
    # two probes each starting one OpenMP thread per core oversubscribe the machine (an LSTM ran 3-30x slower)
    from tools.probe_runner import PROBE_THREADS

    _script(workspace, "env.py", """
        import os
        print("threads", os.environ.get("OMP_NUM_THREADS"), os.environ.get("MKL_NUM_THREADS"))
    """)

    def threads_seen(share):
        async def body():
            token = PROBE_THREADS.set(share)
            try:
                return await run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=30,
                                       command=[sys.executable, "env.py"])
            finally:
                PROBE_THREADS.reset(token)
        return run(body).stdout_tail.split("threads", 1)[1].split()

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    assert threads_seen(None) == ["None", "None"]  # one probe alone: torch's own default
    assert threads_seen(1) == ["1", "1"]
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads_seen(1)[0] == "3"


# --- probes forked from a fork server (triage): same answers, same guarantees ----------------------

FORKED_HEAD = """
    import json, os, sys, time
    job = sys.argv[1]
    args = json.load(open(os.path.join(job, "args.json")))
"""


def _forked(workspace, body: str, args: dict | None = None, timeout_s: float = 60, threads: int | None = None,
            inside=None):
    """Run a probe file through a ready fork server; returns (outcome, the fork server's pid).
    `inside(outcome)` runs after the probe while the fork server still lives."""
    import os

    import anyio

    from tools.probe_runner import PROBE_THREADS, ForkServers

    probe = _script(workspace, "probe_file.py", textwrap.dedent(FORKED_HEAD) + textwrap.dedent(body))

    async def go():
        share = PROBE_THREADS.set(threads)
        try:
            with ForkServers() as forks:
                with anyio.fail_after(120):  # the fork server imports torch first
                    while forks.ready(sys.executable, dict(os.environ)) is None:
                        await anyio.sleep(0.1)
                oc = await run_probe(str(probe), args or {}, workspace_root=workspace, python=sys.executable,
                                     timeout_s=timeout_s)
                (server,) = forks.servers.values()
                assert server.proc.poll() is None
                if inside is not None:
                    inside(oc)
                return oc, server.proc.pid
        finally:
            PROBE_THREADS.reset(share)

    return run(go)


def test_a_forked_probe_answers_like_a_fresh_interpreter(workspace, no_stray_processes):
    oc, server = _forked(workspace, """
        import torch
        print("to stdout"); print("to stderr", file=sys.stderr)
        with open(os.path.join(job, "result.json"), "w") as f:
            json.dump({"ppid": os.getppid(), "cwd": os.getcwd(), "threads": torch.get_num_threads(),
                       "job": os.environ["MLTRIAGE_JOB"], "name": __name__}, f)
    """, threads=1)
    assert oc.returncode == 0, oc.stderr_tail
    assert oc.result["ppid"] == server, "the probe was not forked by the fork server"
    assert oc.result["cwd"] == str(workspace) and oc.result["name"] == "__main__"
    assert oc.result["threads"] == 1  # the share triage sets, though torch was loaded before it
    assert "to stdout" in oc.stdout_tail and "to stderr" in oc.stderr_tail
    assert not _alive(server), "the fork server outlived its block"


def test_a_forked_probe_exit_code_and_uncaught_error_are_reported(workspace):
    oc, _ = _forked(workspace, "sys.exit(3)\n")
    assert oc.returncode == 3 and oc.result is None and "code 3" in oc.failure()
    oc, _ = _forked(workspace, "raise RuntimeError('boom')\n")
    assert oc.returncode == 1 and "RuntimeError: boom" in oc.stderr_tail


def test_a_forked_probe_that_segfaults_is_reported_as_a_signal(workspace, no_stray_processes):
    oc, _ = _forked(workspace, "import ctypes\nctypes.string_at(0)\n")
    assert oc.crashed_by == "SIGSEGV", (oc.returncode, oc.stderr_tail)


@pytest.mark.parametrize("after", ["time.sleep(600)", "print('done')"], ids=["hangs", "ends"])
def test_a_forked_probe_takes_its_daemon_and_setsid_child_along(after, workspace, tmp_path, no_stray_processes):
    # a forked daemon carries the fork server's marker, a started child the probe's: neither may survive
    survivors: list[int] = []
    oc, _ = _forked(workspace, f"""
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open(args["pidfile"] + ".child", "w").write(str(child.pid))
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open(args["pidfile"], "w").write(str(os.getpid()))
                time.sleep(600)
            os._exit(0)
        while not os.path.exists(args["pidfile"]):
            time.sleep(0.02)
        {after}
    """, {"pidfile": str(tmp_path / "daemon.pid")}, timeout_s=5, inside=lambda oc: survivors.extend(
        pid for pid in (_pid(tmp_path / "daemon.pid"), _pid(tmp_path / "daemon.pid.child")) if _alive(pid)))
    assert oc.timed_out == (after == "time.sleep(600)")
    # gone with the probe, not only when the fork server ends: the shared one outlives many probes
    assert survivors == []
    assert not _alive(_pid(tmp_path / "daemon.pid")) and not _alive(int((tmp_path / "daemon.pid.child").read_text()))


def test_probes_outside_a_block_share_one_fork_server_that_survives_them(workspace, no_stray_processes):
    import os

    import anyio

    from tools.probe_runner import SHARED_FORKS

    probe = _script(workspace, "probe_file.py", textwrap.dedent(FORKED_HEAD) + textwrap.dedent("""
        with open(os.path.join(job, "result.json"), "w") as f:
            json.dump({"ppid": os.getppid()}, f)
    """))

    async def go():
        with anyio.fail_after(120):  # the first probes run fresh while the fork server imports torch
            while SHARED_FORKS.ready(sys.executable, dict(os.environ)) is None:
                oc = await run_probe(str(probe), {}, workspace_root=workspace, python=sys.executable)
                assert oc.returncode == 0, oc.stderr_tail
                await anyio.sleep(0.1)
        return [await run_probe(str(probe), {}, workspace_root=workspace, python=sys.executable) for _ in range(2)]

    first, second = run(go)
    forks = {s.proc.pid for s in SHARED_FORKS.servers.values()}
    assert first.result["ppid"] == second.result["ppid"] and first.result["ppid"] in forks
    assert all(_alive(pid) for pid in forks)


def test_an_idle_fork_server_ends_by_itself_and_a_stale_one_is_replaced(tmp_path):
    import os
    import time

    from tools.probe_runner import ForkServers

    env = dict(os.environ)
    forks = ForkServers(idle_s=1.0)
    try:
        deadline = time.monotonic() + 120
        while (server := forks.ready(sys.executable, env)) is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        server.proc.wait(timeout=30)  # no request for a second: it ends, and the next call starts another
        assert forks.ready(sys.executable, env) is None and list(forks.servers.values()) != [server]
        while (server := forks.ready(sys.executable, env)) is None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # the torch it imported was reinstalled since (a stand-in file's time changes): replaced on the next call
        stand_in = tmp_path / "torch_init.py"
        stand_in.write_text("")
        server.torch = (str(stand_in), 1)
        assert forks.ready(sys.executable, env) is None and not _alive(server.proc.pid)
    finally:
        forks.close()
    assert forks.servers == {}
