"""Fork server: imports torch once, then forks one child per probe. Stdlib only besides that import.

Importing torch costs seconds per process (2-3 s on this project's 2-core machines), and triage runs up to a
dozen probes: each probe is still its own process (its own session, its own files, killed alone on timeout),
but it starts from a copy of this one instead of a fresh interpreter. The protocol is one JSON line each way:

    in:  {"argv": [probe_file, job_dir], "cwd": ..., "env": {...}, "stdout": path, "stderr": path, "tag": name}
    out: {"ready": true, "torch": path} once, then {"pid": N} per request (in order) and {"exit": N, "code": rc}
         per child (rc < 0: killed by that signal), as Popen reports it.

A forked child's /proc environment is the fork server's, whatever it sets later: so each child also takes the
request's `tag` as its process name (comm), which its own forks inherit and the runner's sweep looks for.
End of input (the server closed the pipe or died) kills every child and ends the server; so does `--idle S`
seconds with no request and no child (the server that started it then starts a new one when it needs one).
"""

import ctypes
import json
import os
import select
import signal
import sys
import time

PR_SET_NAME = 15


def set_name(tag: str) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, tag.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def child(req: dict, proto: int) -> None:
    """Become the probe process: a new session, its own output files, the server's environment, then run it."""
    code = 1
    try:
        os.setsid()
        os.close(proto)
        if req.get("tag"):
            set_name(req["tag"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            new = os.open(path, flags, 0o600)
            os.dup2(new, fd)
            os.close(new)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        # the OpenMP pool read its thread count when torch was loaded here: apply the probe's own
        threads = req["env"].get("OMP_NUM_THREADS", "")
        if threads.isdigit() and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads))
        sys.argv = list(req["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
        import runpy
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - what an interpreter prints for an uncaught exception
            import traceback
            traceback.print_exc()
            code = 1
        import atexit
        atexit._run_exitfuncs()  # what a normal interpreter exit runs
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main() -> None:
    proto = os.dup(1)  # the protocol channel; stray prints of an import must not reach it
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    idle_s = float(sys.argv[sys.argv.index("--idle") + 1]) if "--idle" in sys.argv else None
    torch_file = None
    try:
        import torch  # the point of this process

        torch_file = torch.__file__
        # The first optimizer a process builds imports torch._dynamo (Optimizer.__init__ is wrapped to disable it):
        # measured 1.9-2.5 s here, in every probe. Imports only: no thread pool starts before the fork.
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001 - no torch: the probes say so themselves
        pass

    def send(msg: dict) -> None:
        os.write(proto, (json.dumps(msg) + "\n").encode())

    children: set[int] = set()
    send({"ready": True, "torch": torch_file})
    buf, last = b"", time.monotonic()
    while True:
        ready, _, _ = select.select([0], [], [], 0.05)
        if ready:
            last = time.monotonic()
            chunk = os.read(0, 1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                pid = os.fork()
                if pid == 0:
                    child(json.loads(line), proto)
                children.add(pid)
                send({"pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
            last = time.monotonic()
        if idle_s is not None and not children and not buf and time.monotonic() - last > idle_s:
            break
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    main()
