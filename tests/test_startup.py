"""Start-up stays light: nothing heavy is imported at start, and the collector is back on once serving."""

import gc
import pkgutil
import subprocess
import sys

import tools
from conftest import ROOT

HEAVY = ("torch", "numpy", "matplotlib", "pandas", "scipy")


def _python(*args: str, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120, stdin=stdin)


def test_no_tool_module_imports_torch_numpy_or_matplotlib_when_imported():
    names = [m.name for m in pkgutil.iter_modules(tools.__path__) if not m.ispkg]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module('tools.' + name)\n"
            f"    heavy = [h for h in {HEAVY!r} if h in sys.modules]\n"
            "    if heavy:\n"
            "        print(f'tools.{name} imports {heavy}')\n"
            "        break\n")
    r = _python("-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "", r.stdout


def test_the_real_server_process_imports_nothing_heavy_at_start(workspace):
    # -X importtime lists every module the server process imports, on stderr
    r = _python("-X", "importtime", "-m", "server", "--workspace", str(workspace), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "server.app" in imported, "the server did not start"
    assert not [m for m in imported if m.split(".")[0] in HEAVY]


def test_serving_runs_with_the_collector_enabled_and_start_up_objects_frozen(workspace, monkeypatch):
    from server import cli
    from server.core import mcp

    seen = {}

    def fake_run(transport="stdio", **kwargs):
        seen.update(transport=transport, enabled=gc.isenabled(), frozen=gc.get_freeze_count())

    monkeypatch.setattr(mcp, "run", fake_run)
    try:
        assert cli.main(["serve", "--workspace", str(workspace)]) == 0
    finally:
        gc.unfreeze()
    assert seen["transport"] == "stdio"
    assert seen["enabled"], "a server left with the collector off leaks every reference cycle it makes"
    assert seen["frozen"] > 0
