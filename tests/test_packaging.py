"""The distribution: `python -m build` makes a wheel and an sdist that pass `twine check`, the wheel
carries every file the server reads at run time, and `uvx --from <wheel> mltriage serve` serves from
a fresh environment with no checkout in sight (cwd outside the repository, no PYTHONPATH).

The wheel is built once per session into a temporary directory. uvx resolves the dependencies from
the package index into its own cache (about 46 MB cold, a few seconds; then reused).
"""

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import psutil
import pytest

from conftest import EXAMPLES, run, text_of

pytestmark = pytest.mark.xdist_group("packaging")  # its tests share a module-scoped fixture: one worker runs them all

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# What the server reads from its own installation: code, probes (run by file path in the user's
# interpreter), skills (served as resources) and journal/regression templates.
RUNTIME_DIRS = ("server", "tools", "skills", "journal_templates")
# The MCP client passes the server only a minimal environment; uv still needs the machine's index,
# proxy and CA settings to fetch the dependencies (a client started from a shell inherits them).
NETWORK_ENV = {k: v for k, v in os.environ.items()
               if k.startswith(("UV_", "SSL_CERT_")) or k.lower() in ("http_proxy", "https_proxy", "no_proxy")}


def runtime_files() -> list[str]:
    return sorted(p.relative_to(REPO).as_posix() for d in RUNTIME_DIRS for p in (REPO / d).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # setuptools warns (and silently drops data) when a data directory is missing from `packages`
    assert "absent from the `packages` configuration" not in done.stdout + done.stderr
    [wheel] = out.glob("mltriage-*.whl")
    [sdist] = out.glob("mltriage-*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


def test_wheel_and_sdist_pass_twine_check(dist):
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(dist["wheel"]), str(dist["sdist"])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2


def test_the_wheel_carries_every_file_the_server_reads_at_run_time(dist):
    names = set(zipfile.ZipFile(dist["wheel"]).namelist())
    expected = runtime_files()
    assert [f for f in expected if f not in names] == []
    assert {"tools/probe/inject/sitecustomize.py", "tools/probe/live/sitecustomize.py",
            "skills/ml-training-triage/references/decision-tree.md", "journal_templates/entry.md",
            "journal_templates/tests/nan_inf.py.tmpl"} <= names
    # nothing of the checkout's test or example trees leaks into the installed packages
    assert not any(n.startswith(("tests/", "examples/", "benchmarks/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "mltriage = server.cli:main" in zipfile.ZipFile(dist["wheel"]).read(entry_points).decode()


def test_the_sdist_rebuilds_the_same_package(dist):
    with tarfile.open(dist["sdist"]) as tar:
        root = tar.getnames()[0].split("/")[0]
        names = {n.removeprefix(root + "/") for n in tar.getnames()}
    assert {"pyproject.toml", "README.md"} <= names
    assert [f for f in runtime_files() if f not in names] == []


def _server_process(cmd_word: str = "serve") -> psutil.Process:
    """The server our client started: the descendant of this test whose command line runs `mltriage serve`."""
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        # the console script runs as `<python> <env>/bin/mltriage serve ...` (uv's own process is not it)
        if cmd_word in cmd and Path(cmd[0]).name.startswith("python") and any(Path(c).name == "mltriage" for c in cmd):
            return p
    raise AssertionError("no `mltriage serve` process found")


def _uvx_env(uvx: list[str], cwd: Path) -> dict[str, str]:
    """The environment in which uvx can build the wheel's environment: from the index, else from uv's cache.

    Creating it up front (`mltriage --help`) also turns a resolution failure into its own message
    instead of a closed MCP connection.
    """
    base = {**NETWORK_ENV, "UV_PYTHON_DOWNLOADS": "never", "HOME": os.environ.get("HOME", "/")}
    tried = []
    for env in (base, {**base, "UV_OFFLINE": "1"}):  # offline: a machine whose cache an earlier run filled
        done = subprocess.run([*uvx, "--help"], cwd=cwd, env={**env, "PATH": os.environ.get("PATH", "")},
                              capture_output=True, text=True, timeout=300)
        if done.returncode == 0:
            return env
        tried.append(done.stderr[-1500:])
    pytest.fail("uvx could not create the environment from the wheel, online or from its cache:\n" + "\n".join(tried))


def test_uvx_serves_the_built_wheel_outside_the_checkout(dist, tmp_path, no_stray_processes):
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    ws = tmp_path / "project"
    (ws / "logs").mkdir(parents=True)
    (ws / "logs" / "train.log").write_text("".join(f"step {i} loss {2.3 - i * 0.01:.4f}\n" for i in range(40))
                                          + "step 40 loss nan\n")
    (ws / "bad_init").mkdir()
    (ws / "bad_init" / "train.py").write_text((EXAMPLES / "bad_init" / "train.py").read_text())
    elsewhere = tmp_path / "elsewhere"  # the client's cwd: neither the repository nor the workspace
    elsewhere.mkdir()
    # the base interpreter, not this venv's: the server must find its packages in the wheel alone
    uvx = [str(BIN / "uvx"), "--python", sys._base_executable, "--from", str(dist["wheel"]), "mltriage"]
    env = _uvx_env(uvx, elsewhere)
    params = StdioServerParameters(
        command=uvx[0], args=[*uvx[1:], "serve", "--workspace", str(ws)], cwd=str(elsewhere),
        # the probes run in the user's interpreter (this one has torch); the server's own env has none
        env={**env, "MLTRIAGE_PYTHON": sys.executable},
    )

    async def body():
        async with Client(params) as client:
            server = _server_process()
            cmdline = " ".join(server.cmdline())
            assert str(REPO) not in cmdline, f"the server runs from the checkout: {cmdline}"
            no_torch = subprocess.run([server.cmdline()[0], "-c", "import importlib.util as u, sys; "
                                       "sys.exit(u.find_spec('torch') is not None)"], timeout=60)
            assert no_torch.returncode == 0, "uvx installed torch into the server's environment"

            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"tail_log", "triage", "init_loss_check", "journal_append"} <= tools

            tail = await client.call_tool("tail_log", {"path": "logs/train.log", "lines": 10})
            assert not tail.is_error, text_of(tail)
            assert "nan" in text_of(tail).lower()

            # skills ship in the wheel and are served as resources
            uris = {str(r.uri) for r in (await client.list_resources()).resources}
            assert "skill://ml-training-triage/SKILL.md" in uris
            tree = await client.read_resource("skill://ml-training-triage/references/decision-tree.md")
            assert tree.contents and tree.contents[0].text.strip()

            # a probe file from the wheel runs by path in the user's interpreter
            init = await client.call_tool("init_loss_check", {"target": "bad_init/train.py:make_target"})
            assert not init.is_error, text_of(init)
            assert init.structured_content["verdict"] == "too_high"

            # the journal template ships too
            entry = await client.call_tool("journal_append", {
                "title": "init loss 10x chance", "failure_mode": "bad_init", "symptom": "loss 23 at step 0",
                "root_cause": "final layer init scale 10", "fix": "default init",
                "evidence": ["init_loss_check: too_high"]})
            assert not entry.is_error, text_of(entry)

    run(body)
    assert "final layer init scale 10" in (ws / "journal.md").read_text()
    assert not (REPO / "journal.md").exists() or "final layer init scale 10" not in (REPO / "journal.md").read_text()
