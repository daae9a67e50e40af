"""process_check against real processes: busy, blocked on a lock, zombie, stopped, with children."""

import os
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from tools.errors import TriageError
from tools.processes import process_check

pytestmark = pytest.mark.usefixtures("no_stray_processes")


def spawn(code: str, tag: str, **kw) -> subprocess.Popen:
    """A python process whose command line carries `tag`, so process_check(pattern=tag) finds only it."""
    p = subprocess.Popen([sys.executable, "-c", f"# {tag}\n" + code], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    deadline = time.time() + 10
    while time.time() < deadline:  # wait until the interpreter is running the code
        try:
            if tag in " ".join(psutil.Process(p.pid).cmdline()):
                time.sleep(0.3)
                return p
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    raise AssertionError("process did not start")


def stop(p: subprocess.Popen) -> None:
    for c in psutil.Process(p.pid).children(recursive=True) if p.poll() is None else []:
        c.kill()
    p.kill()
    p.wait()


@pytest.fixture
def tag():
    return f"mltriage-test-{uuid.uuid4().hex[:8]}"


def test_busy_loop_is_running(tag):
    p = spawn("while True: pass", tag)
    try:
        r = process_check(pattern=tag)
        (info,) = r.processes
        assert info.pid == p.pid and info.verdict == "running" and info.cpu_percent > 1  # > 1%: the machine may be loaded
        assert info.status == "running" and info.threads >= 1 and info.rss_mib > 1
        assert r.findings == []
    finally:
        stop(p)


def test_process_blocked_on_a_lock_is_possibly_hung(tag):
    p = spawn("import threading\nl = threading.Lock()\nl.acquire()\nl.acquire()", tag)
    try:
        (info,) = process_check(pattern=tag).processes
        assert info.verdict == "possibly_hung" and info.cpu_percent < 1
        assert info.status == "sleeping"
    finally:
        stop(p)


def test_idle_process_writing_its_log_is_running_not_hung(tag, tmp_path):
    log = tmp_path / "train.log"
    p = spawn(f"import time\nf = open({str(log)!r}, 'a')\nwhile True:\n    f.write('step\\n'); f.flush(); time.sleep(0.2)", tag)
    try:
        (info,) = process_check(pattern=tag).processes
        assert info.verdict == "running"
        assert [l.path for l in info.open_logs] == [str(log)] and info.open_logs[0].stale_s < 5
    finally:
        stop(p)


def test_zombie_is_reported_as_zombie(tag):
    # the parent never waits for its child: the child stays a zombie while the parent sleeps
    parent = spawn("import subprocess, sys, time\n"
                   f"subprocess.Popen([sys.executable, '-c', '# {tag}-child'])\n"
                   "time.sleep(60)", tag)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            kids = psutil.Process(parent.pid).children()
            if kids and kids[0].status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        r = process_check(pid=kids[0].pid, stack=True)
        (info,) = r.processes
        assert info.verdict == "zombie" and "already exited" in info.stack_note
        assert [f.failure_mode for f in r.findings] == ["exception"]
        parent_report = process_check(pid=parent.pid)
        assert parent_report.processes[0].children[0].status == "zombie"
        assert "hang" in [f.failure_mode for f in parent_report.findings]  # a dead worker stalls its parent
    finally:
        stop(parent)


def test_stopped_process_is_stopped_and_the_fix_is_sigcont(tag):
    p = spawn("while True: pass", tag)
    try:
        os.kill(p.pid, signal.SIGSTOP)
        time.sleep(0.1)
        r = process_check(pid=p.pid)
        assert r.processes[0].verdict == "stopped"
        assert f"kill -CONT {p.pid}" in r.findings[0].fix
    finally:
        os.kill(p.pid, signal.SIGCONT)
        stop(p)


def test_children_are_listed_with_their_states_and_cpu_counts_for_the_parent(tag):
    code = ("import multiprocessing as mp, time\n"
            "def work():\n    while True: pass\n"
            "if __name__ == '__main__':\n"
            "    ps = [mp.Process(target=work) for _ in range(2)]\n"
            "    [p.start() for p in ps]\n    time.sleep(60)\n")
    p = spawn(code, tag)
    try:
        deadline = time.time() + 10
        while len(psutil.Process(p.pid).children()) < 2 and time.time() < deadline:
            time.sleep(0.05)
        (info,) = process_check(pid=p.pid).processes
        assert len(info.children) >= 2 and all(c.status in ("running", "sleeping") for c in info.children)
        assert info.children_cpu_percent > 1 and info.children_cpu_percent > info.cpu_percent
        assert info.verdict == "running"  # the parent waits, but its workers are busy
    finally:
        stop(p)


def test_stack_shows_where_a_hung_process_waits(tag):
    p = spawn("import threading\ndef wait_for_batch():\n    l = threading.Lock(); l.acquire(); l.acquire()\nwait_for_batch()", tag)
    try:
        (info,) = process_check(pid=p.pid, stack=True).processes
        if info.stack is None:  # py-spy missing or ptrace denied: the note must say how to get one
            assert "py-spy" in info.stack_note and "faulthandler" in info.stack_note
        else:
            assert "wait_for_batch" in info.stack
    finally:
        stop(p)


def test_pid_that_does_not_exist_is_a_clear_error():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    with pytest.raises(TriageError, match=f"no process with pid {p.pid}") as e:
        process_check(pid=p.pid)
    assert "pattern" in str(e.value)


def test_nothing_matching_is_an_empty_report_not_an_error(tag):
    r = process_check(pattern=tag)
    assert r.processes == [] and "nothing matched" in r.notes[0]


def test_all_processes_are_sampled_in_one_window(tag, monkeypatch):
    import tools.processes as procs
    ps = [spawn("import time\ntime.sleep(60)", tag) for _ in range(4)]
    sleeps = []
    monkeypatch.setattr(procs.time, "sleep", lambda s: sleeps.append(s))  # the time module: undo before stop()
    try:
        r = process_check(pattern=tag)
        assert len(r.processes) == 4
        assert sleeps == [procs.WINDOW_S]  # one shared window, not one per process
    finally:
        monkeypatch.undo()
        for p in ps:
            stop(p)
