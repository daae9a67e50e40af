"""process_check under hostile patterns: catastrophic backtracking must not freeze the server."""

import subprocess
import sys
import textwrap

import pytest

from tests.test_processes import spawn, stop, tag  # noqa: F401 - the fixture is used by name
from tools.errors import TriageError
from tools.processes import process_check

pytestmark = pytest.mark.usefixtures("no_stray_processes")


def test_catastrophic_backtracking_pattern_returns(tag):  # noqa: F811
    # A command line of 40 'a's then a non-'a': backtracking `re` needs ~2^40 steps for (a+)+$.
    victim = spawn("import time\ntime.sleep(120)", tag + " " + "a" * 40 + "!")
    try:
        # In a child interpreter: a stuck C-level regex loop would ignore pytest's alarm, not a kill.
        code = textwrap.dedent("""
            from tools.processes import process_check
            r = process_check(pattern='(a+)+$')
            print('answered', len(r.processes))
        """)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "answered" in done.stdout
    finally:
        stop(victim)


def test_regex_still_matches_the_command_line(tag):  # noqa: F811
    p = spawn("import time\ntime.sleep(60)", tag)
    try:
        r = process_check(pattern=f"(?:nothing-else|{tag})")
        assert [i.pid for i in r.processes] == [p.pid]
        assert process_check(pattern=tag.upper()).processes  # case-insensitive, as before
    finally:
        stop(p)


def test_pattern_re2_cannot_parse_is_a_substring(tag):  # noqa: F811
    # A backreference is not RE2 syntax: the pattern is then looked for as plain text.
    p = spawn("import time\ntime.sleep(60)", tag + r" (x)\1")
    try:
        r = process_check(pattern=tag + r" (x)\1")
        assert [i.pid for i in r.processes] == [p.pid]
    finally:
        stop(p)


def test_huge_pattern_is_a_clear_error():
    with pytest.raises(TriageError, match="characters long"):
        process_check(pattern="a" * 100_000)
