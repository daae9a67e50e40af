"""Probe-side plumbing: read the job's arguments, report progress, write the result. Stdlib only.

Runs inside the user's interpreter, so the name carries the mltriage_ prefix.
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path


class Job:
    def __init__(self, job_dir: str):
        self.dir = Path(job_dir)
        self.args = json.loads((self.dir / "args.json").read_text())
        self._last = 0.0

    def progress(self, progress: float, total: float | None = None, message: str | None = None, force=False):
        now = time.monotonic()
        if not force and now - self._last < 0.2:  # the server polls; no need to flood it
            return
        self._last = now
        with open(self.dir / "progress.jsonl", "a") as f:
            f.write(json.dumps({"progress": progress, "total": total, "message": message}) + "\n")

    def write(self, payload: dict) -> None:
        tmp = self.dir / "result.json.tmp"
        # allow_nan: the server maps NaN/Infinity to explicit markers before anything reaches JSON-RPC
        tmp.write_text(json.dumps(payload, default=str))
        os.replace(tmp, self.dir / "result.json")


class UserCodeError(Exception):
    """The user's code raised: reported as data (an `exception` finding), not as a probe failure."""

    def __init__(self, phase: str, exc: BaseException):
        self.phase, self.exc = phase, exc
        super().__init__(f"{phase}: {type(exc).__name__}: {exc}")


def error_payload(kind: str, exc: BaseException, phase: str | None = None) -> dict:
    tb = traceback.extract_tb(exc.__traceback__)
    # the innermost frame of the user's code, not torch's internals or ours
    here = os.path.dirname(os.path.abspath(__file__))
    theirs = [f for f in tb if not f.filename.startswith(here) and f"{os.sep}torch{os.sep}" not in f.filename]
    frame = theirs[-1] if theirs else (tb[-1] if tb else None)
    return {"ok": False, "error": {
        "kind": kind, "phase": phase, "type": type(exc).__name__, "message": str(exc)[:2000],
        "file": frame.filename if frame else None, "line": frame.lineno if frame else None,
        "traceback": "".join(traceback.format_exception(exc))[-6000:],
    }}


def arm_stack_dump(args: dict) -> None:
    """Print every thread's stack to stderr shortly before the server's timeout kills us: where a hang waits."""
    after = args.get("_stack_dump_after_s")
    if after:
        import faulthandler
        faulthandler.dump_traceback_later(float(after), exit=False, file=sys.stderr)


def main(run) -> None:
    """Entry point of every probe: `run(job) -> dict` returns the report; errors become payloads."""
    job = Job(sys.argv[1])
    arm_stack_dump(job.args)
    try:
        job.write({"ok": True, "report": run(job)})
    except UserCodeError as e:
        job.write(error_payload("user_code", e.exc, e.phase))
    except Exception as e:  # noqa: BLE001 - the probe must always answer
        job.write(error_payload("probe", e))
