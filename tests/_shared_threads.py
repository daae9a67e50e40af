"""One OpenMP thread per torch process, for test modules whose tests start many of them.

The suite runs on two xdist workers; a torch process that starts with torch's default (one OpenMP thread per
core) beside the other worker's oversubscribes the cores, and small kernels then wait on spinning threads: the
nanoGPT fixture's 25-step script measured 22 s that way against 4 s with one thread, on 2 cores. The tools
under test pass the caller's OMP_NUM_THREADS on to what they start ("the user's own setting wins",
tools/probe_runner.py), so setting it here pins the generated pytest runs, the user's scripts and the probes
without changing what they run.

Import `one_thread_per_process` into a module to use it there (autouse); pass `ONE_THREAD` as `env=` to
`stdio_client`, whose server does not inherit the test's environment. Not for a test of the thread share itself
(tests/test_probe_runner.py), which must see torch's default.
"""

import pytest

ONE_THREAD = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def one_thread_per_process(monkeypatch):
    for key, value in ONE_THREAD.items():
        monkeypatch.setenv(key, value)
