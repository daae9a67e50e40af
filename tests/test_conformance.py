"""Conformance with clients we did not write: the MCP Inspector CLI over stdio and HTTP, and the
official `@modelcontextprotocol/conformance` server scenarios over HTTP.

Both npm packages are pinned in `.ci/node/package.json` (+ lock) and installed by `.ci/run` with
`npm ci --prefix .ci/node`. Without node or without that install every test here is skipped with
the reason. Each Inspector run spawns its own stdio server; every server is checked gone afterwards.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from conftest import PYTHON, ROOT
from test_http import TOKEN, http_server

NODE_DIR = ROOT / ".ci" / "node"
BIN = NODE_DIR / "node_modules" / ".bin"
INSPECTOR = BIN / "mcp-inspector"
CONFORMANCE = BIN / "conformance"
BEARER_PRELOAD = NODE_DIR / "bearer.mjs"
TIMEOUT = 60


def _node_missing() -> str | None:
    node = shutil.which("node")
    if node is None:
        return "node is not on PATH: the conformance check needs node >= 20 and `npm ci --prefix .ci/node`"
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"node does not run ({e})"
    major = re.match(r"v(\d+)", version)
    if not major or int(major.group(1)) < 20:
        return f"node {version or '?'} is too old: the pinned Inspector and conformance packages need node >= 20"
    missing = [p.name for p in (INSPECTOR, CONFORMANCE) if not p.exists()]
    if missing:
        return f"{', '.join(missing)} not installed: run `npm ci --prefix .ci/node` (what .ci/run does)"
    return None


SKIP_REASON = _node_missing()
pytestmark = [pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
              pytest.mark.usefixtures("no_stray_processes"),
              pytest.mark.xdist_group("conformance")]  # one worker: the module-scoped server fixture


def _node_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: the Inspector keeps its catalog under $HOME, and must not try a keychain."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "MCP_INSPECTOR_SECRET_STORE": "memory", "NO_COLOR": "1", **extra}


def _run_node(args: list, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """Run a node CLI in its own session; on a timeout the whole session (stdio server included) goes."""
    proc = subprocess.Popen([shutil.which("node"), *map(str, args)], cwd=cwd, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{args[0]} did not finish in {TIMEOUT}s: {err[-2000:]}")
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _servers_of(workspace: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if str(workspace) in (p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            pass
    return found


def _assert_no_server_left(workspace: Path) -> None:
    deadline = time.monotonic() + 10
    while (left := _servers_of(workspace)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in left:
        p.kill()
    assert not left, f"server processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


def _inspector(tmp_path: Path, *args: str, target: list[str] | None = None) -> tuple[int, dict]:
    """`mcp-inspector --cli --format json ARGS [-- TARGET]` -> (exit code, the JSON it printed)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cmd = [INSPECTOR, "--cli", "--format", "json", "--quiet", *args, *(["--", *target] if target else [])]
    r = _run_node(cmd, _node_env(home), tmp_path)
    text = r.stdout.strip() or r.stderr.strip()
    try:
        return r.returncode, json.loads(text.splitlines()[-1])
    except (ValueError, IndexError):
        pytest.fail(f"the Inspector printed no JSON (exit {r.returncode}): {r.stdout[-1500:]} {r.stderr[-1500:]}")


def _check_list_and_call(call) -> None:
    """tools/list, tools/call (a good and a confined-out path), resources/list, prompts/list."""
    rc, out = call("--method", "tools/list")
    assert rc == 0, out
    tools = {t["name"]: t for t in out["result"]["tools"]}
    assert {"tail_log", "triage", "nan_hook_run", "journal_append"} <= set(tools)
    assert all(t["inputSchema"]["type"] == "object" for t in tools.values())

    rc, out = call("--method", "tools/call", "--tool-name", "tail_log", "--tool-arg", "path=train.log")
    assert rc == 0, out
    result = out["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["last_step"] == 2
    assert result["structuredContent"]["lines"] == ["step 1 | loss 2.30", "step 2 | loss 2.10"]
    assert "last step 2" in result["content"][0]["text"]

    rc, out = call("--method", "tools/call", "--tool-name", "tail_log", "--tool-arg", "path=../escape.log")
    assert out["result"]["isError"] is True and "outside" in out["result"]["content"][0]["text"], out

    rc, out = call("--method", "resources/list")
    assert rc == 0, out
    uris = {r["uri"] for r in out["result"]["resources"]}
    assert "skill://ml-training-triage/SKILL.md" in uris

    rc, out = call("--method", "prompts/list")
    assert rc == 0, out
    assert {"triage_training_failure", "after_fix"} <= {p["name"] for p in out["result"]["prompts"]}


def _train_log(workspace: Path) -> None:
    (workspace / "train.log").write_text("step 1 | loss 2.30\nstep 2 | loss 2.10\n")


def test_inspector_cli_over_stdio(workspace, tmp_path):
    _train_log(workspace)
    server = [PYTHON, "-m", "server", "--workspace", str(workspace)]

    def call(*args):
        try:
            return _inspector(tmp_path, "--cwd", str(ROOT), "-e", f"PYTHONPATH={ROOT}", *args, target=server)
        finally:
            _assert_no_server_left(workspace)

    _check_list_and_call(call)
    assert not (workspace.parent / "escape.log").exists()


def test_inspector_cli_modern_era_over_stdio_calls_and_verifies_the_skills_extension(workspace, tmp_path):
    """On the 2026-07-28 era (server/discover) the skills extension is declared: skills/list with the
    Inspector's SEP-2640 --verify checks every skill's frontmatter and sha256 digest. On the initialize
    handshake it is not (that revision's capabilities have no `extensions`; README "Conformance")."""
    _train_log(workspace)
    server = [PYTHON, "-m", "server", "--workspace", str(workspace)]

    def call(*args):
        try:
            return _inspector(tmp_path, "--cwd", str(ROOT), "-e", f"PYTHONPATH={ROOT}", *args, target=server)
        finally:
            _assert_no_server_left(workspace)

    rc, out = call("--protocol-era", "modern", "--method", "tools/call", "--tool-name", "tail_log",
                   "--tool-arg", "path=train.log")
    assert rc == 0 and out["result"]["structuredContent"]["last_step"] == 2, out

    home = tmp_path / "home"
    r = _run_node([INSPECTOR, "--cli", "--format", "json", "--quiet", "--cwd", ROOT, "-e", f"PYTHONPATH={ROOT}",
                   "--protocol-era", "modern", "--verify", "--method", "skills/list", "--", *server],
                  _node_env(home), tmp_path)
    _assert_no_server_left(workspace)
    reports = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    skills = sorted(p.parent.name for p in (ROOT / "skills").glob("*/SKILL.md"))
    assert sorted(x["name"] for x in reports) == skills
    assert all(x["ok"] and x["outcome"] == "verified" and not x["conformance"] and not x["frontmatter"]
               for x in reports), [x for x in reports if not x["ok"]]

    rc, out = call("--method", "skills/list")  # the legacy handshake: not declared, so the Inspector will not ask
    assert rc != 0 and out["error"]["code"] == "skills_unsupported", out


def test_inspector_cli_over_http_with_the_bearer_token(workspace, tmp_path):
    _train_log(workspace)
    with http_server(workspace) as (port, _):
        url = f"http://127.0.0.1:{port}/mcp"

        def call(*args):
            return _inspector(tmp_path, "--transport", "http", "--server-url", url,
                              "--header", f"Authorization: Bearer {TOKEN}", *args)

        _check_list_and_call(call)
        # without the token (and never an interactive OAuth attempt) the server refuses
        rc, out = _inspector(tmp_path, "--transport", "http", "--server-url", url, "--stored-auth-only",
                             "--method", "tools/list")
        assert rc != 0 and out["error"]["code"] == "auth_required", out
    _assert_no_server_left(workspace)


# --- the official conformance package: server scenarios over HTTP ---------------------------------

# The scenarios that apply to this server as it is: no fixture tools, resources or prompts needed.
APPLICABLE = [
    "server-initialize",            # initialize result shape, serverInfo, protocol version
    "ping",
    "tools-list",                   # every tool: name, description, object input schema
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",  # concurrent POST SSE streams on one session
    "dns-rebinding-protection",     # a foreign Host/Origin refused, localhost accepted
]

# The others, and why each cannot pass against mltriage (they target the suite's "everything" server).
NOT_APPLICABLE = {
    "logging-set-level": "no logging capability advertised: logging/setLevel is -32601, as the spec says",
    "completion-complete": "no completions capability advertised: completion/complete is -32601",
    "resources-subscribe": "resources.subscribe is advertised false: resources/subscribe is -32601",
    "resources-unsubscribe": "resources.subscribe is advertised false: resources/unsubscribe is -32601",
    "tools-call-with-logging": "needs the fixture tool test_tool_with_logging and the logging capability",
    # These two "pass" against any server, since an unknown tool is an isError text result; they test
    # the fixture tools test_simple_text / test_error_handling, not this server, so they are not counted.
    "tools-call-simple-text": "needs the fixture tool test_simple_text",
    "tools-call-error": "needs the fixture tool test_error_handling",
    **{s: "needs a fixture tool of the suite's test server" for s in (
        "tools-call-image", "tools-call-audio", "tools-call-embedded-resource", "tools-call-mixed-content",
        "tools-call-with-progress", "tools-call-sampling", "tools-call-elicitation", "json-schema-2020-12",
        "elicitation-sep1034-defaults", "elicitation-sep1330-enums", "server-sse-polling")},
    **{s: "needs the suite's test:// fixture resources" for s in (
        "resources-read-text", "resources-read-binary", "resources-templates-read")},
    **{s: "needs the suite's test_* fixture prompts" for s in (
        "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image")},
}


@pytest.fixture(scope="module")
def http_endpoint(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("conformance") / "ws"
    workspace.mkdir()
    _train_log(workspace)
    with http_server(workspace) as (port, _):
        yield f"http://127.0.0.1:{port}", workspace
    _assert_no_server_left(workspace)


def _conformance(tmp_path: Path, *args: str, origin: str | None = None) -> subprocess.CompletedProcess:
    # The runner takes a URL and nothing else; the preload adds the bearer token to its requests
    # (and only to requests for this server), through undici's global dispatcher.
    extra = {"NODE_OPTIONS": f"--import={BEARER_PRELOAD.as_uri()}", "MCP_BEARER_TOKEN": TOKEN,
             "MCP_BEARER_ORIGIN": origin} if origin else {}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return _run_node([CONFORMANCE, *args], _node_env(home, **extra), tmp_path)


def test_every_server_scenario_of_the_pinned_package_is_classified(tmp_path):
    r = _conformance(tmp_path, "list", "--server")
    assert r.returncode == 0, r.stderr
    listed = set(re.findall(r"^\s*-\s*(\S+)\s*$", r.stdout, re.M))
    assert listed, r.stdout
    assert not set(APPLICABLE) & set(NOT_APPLICABLE)
    assert listed == set(APPLICABLE) | set(NOT_APPLICABLE), (
        f"new: {sorted(listed - set(APPLICABLE) - set(NOT_APPLICABLE))}; "
        f"gone: {sorted(set(APPLICABLE) | set(NOT_APPLICABLE) - listed)}")


@pytest.mark.parametrize("scenario", APPLICABLE)
def test_conformance_server_scenario_passes_over_http(scenario, http_endpoint, tmp_path):
    origin, _ = http_endpoint
    out_dir = tmp_path / "results"
    r = _conformance(tmp_path, "server", "--url", f"{origin}/mcp", "--scenario", scenario, "-o", str(out_dir),
                     origin=origin)
    checks_files = list(out_dir.glob("*/checks.json"))
    assert len(checks_files) == 1, f"exit {r.returncode}: {r.stdout[-2000:]} {r.stderr[-2000:]}"
    checks = json.loads(checks_files[0].read_text())
    failed = [c for c in checks if c["status"] == "FAILURE"]
    passed = [c for c in checks if c["status"] == "SUCCESS"]
    assert not failed, json.dumps(failed, indent=1)[:3000]
    assert passed, checks
    assert r.returncode == 0, r.stdout[-2000:]
