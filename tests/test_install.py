"""`mltriage install`: each client's config merged (never clobbered), backed up, idempotent; dry runs write nothing."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from server import install
from server.skillpack import SKILLS_DIR

REPO = Path(__file__).resolve().parent.parent
SKILL_FILES = sorted(p.relative_to(SKILLS_DIR).as_posix() for p in SKILLS_DIR.rglob("*") if p.is_file())
OTHER = {"command": "npx", "args": ["-y", "some-other-server"], "env": {"TOKEN": "keep-me"}}


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("APPDATA", raising=False)
    return h


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    return p


def config_path(client: str, scope: str, project: Path, home: Path) -> Path:
    return install.plan(client, scope, project, home).config.path


def servers_key(client: str) -> str:
    return "servers" if client == "vscode" else "mcpServers"


def snapshot(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for r in roots for p in sorted(r.rglob("*")) if p.is_file()}


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".bak-*"))


def do_install(client, scope, project, home, dry_run=False) -> tuple[int, str]:
    out = io.StringIO()
    changed = install.apply(install.plan(client, scope, project, home), dry_run=dry_run, out=out)
    return changed, out.getvalue()


CASES = [(c, s) for c in install.CLIENTS for s in ("project", "user")]


@pytest.mark.parametrize("client,scope", CASES)
def test_install_into_an_empty_setup_writes_the_server_and_the_skills(client, scope, project, home):
    changed, _ = do_install(client, scope, project, home)
    cfg = config_path(client, scope, project, home)
    entry = json.loads(cfg.read_text())[servers_key(client)]["mltriage"]
    assert Path(entry["command"]).is_absolute()
    assert "serve" in entry["args"]
    if client in ("cursor", "vscode"):
        assert entry["args"][-2:] == ["--workspace", "${workspaceFolder}"]
        assert entry["type"] == "stdio"
    elif scope == "project":
        assert entry["args"][-2:] == ["--workspace", str(project.resolve())]
    assert changed >= 1
    assert backups(cfg) == []  # nothing existed, nothing to back up

    skills_root = {
        ("claude", "project"): project / ".claude" / "skills", ("claude", "user"): home / ".claude" / "skills",
        ("gemini", "project"): project / ".gemini" / "skills", ("gemini", "user"): home / ".gemini" / "skills",
        ("vscode", "project"): project / ".github" / "skills", ("vscode", "user"): home / ".copilot" / "skills",
        ("cursor", "user"): home / ".cursor" / "skills",
    }.get((client, scope))
    shared_root = (project if scope == "project" else home) / ".agents" / "skills"  # every client, every scope
    for root in filter(None, (skills_root, shared_root)):
        for rel in SKILL_FILES:
            assert (root / rel).read_bytes() == (SKILLS_DIR / rel).read_bytes()
    if (client, scope) == ("cursor", "project"):
        rule = (project / ".cursor" / "rules" / "mltriage-ml-training-triage.mdc").read_text()
        assert rule.startswith("---\ndescription: ") and "alwaysApply: false" in rule and "tail_log" in rule
    if (client, scope) == ("vscode", "project"):
        assert (project / ".github" / "instructions" / "mltriage.instructions.md").read_text().startswith("---\napplyTo:")

    # idempotent: the second run changes nothing at all
    before = snapshot(project, home)
    changed, out = do_install(client, scope, project, home)
    assert changed == 0 and "unchanged" in out
    assert snapshot(project, home) == before


@pytest.mark.parametrize("client,scope", CASES)
def test_install_next_to_another_server_keeps_it_and_backs_up_first(client, scope, project, home):
    cfg = config_path(client, scope, project, home)
    cfg.parent.mkdir(parents=True, exist_ok=True)
    original = {"theme": "dark", servers_key(client): {"other": OTHER}, "numStartups": 7}
    cfg.write_text(json.dumps(original))
    original_bytes = cfg.read_bytes()

    do_install(client, scope, project, home)

    merged = json.loads(cfg.read_text())
    assert merged[servers_key(client)]["other"] == OTHER
    assert set(merged[servers_key(client)]) == {"other", "mltriage"}
    assert merged["theme"] == "dark" and merged["numStartups"] == 7
    [backup] = backups(cfg)
    assert backup.read_bytes() == original_bytes

    before = snapshot(project, home)
    changed, _ = do_install(client, scope, project, home)
    assert changed == 0
    assert backups(cfg) == [backup], "a second run makes no new backup"
    assert snapshot(project, home) == before


@pytest.mark.parametrize("client", install.CLIENTS)
def test_dry_run_shows_the_diff_and_writes_nothing(client, project, home):
    cfg = config_path(client, "project", project, home)
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(json.dumps({servers_key(client): {"other": OTHER}}))
    before = snapshot(project, home)

    changed, out = do_install(client, "project", project, home, dry_run=True)

    assert snapshot(project, home) == before
    assert changed > 1
    assert f"+++ {cfg}" in out and '+    "mltriage": {' in out and "nothing written" in out


@pytest.mark.parametrize("client", install.CLIENTS)
def test_a_config_that_is_not_json_is_refused_and_nothing_is_written(client, project, home):
    cfg = config_path(client, "project", project, home)
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text('{\n  // my servers\n  "mcpServers": {"other": {"command": "x"}},\n}\n')
    before = snapshot(project, home)

    with pytest.raises(install.InstallError, match=r"not valid JSON .*line 2.*nothing was written"):
        do_install(client, "project", project, home)
    assert snapshot(project, home) == before


def test_a_servers_key_of_the_wrong_type_is_refused(project, home):
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": ["not", "a", "mapping"]}))
    with pytest.raises(install.InstallError, match="'mcpServers' is a list"):
        do_install("claude", "project", project, home)


def test_an_outdated_mltriage_entry_is_replaced_not_duplicated(project, home):
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"mltriage": {"command": "/old/mltriage"}, "other": OTHER}}))
    do_install("claude", "project", project, home)
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert servers["mltriage"]["command"] != "/old/mltriage" and servers["other"] == OTHER
    assert len(backups(project / ".mcp.json")) == 1


def test_the_cli_installs_for_real_and_reports_broken_json_with_exit_code_2(project, home):
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "server", "install", *a], cwd=REPO, env=env,  # noqa: E731
                                    capture_output=True, text=True, timeout=60)
    ok = run("--client", "gemini", "--workspace", str(project))
    assert ok.returncode == 0, ok.stderr
    assert "mltriage" in json.loads((project / ".gemini" / "settings.json").read_text())["mcpServers"]
    assert not (home / ".cache").exists(), "install starts no server and writes no cache"

    (home / ".claude.json").write_text("{broken")
    bad = run("--client", "claude", "--scope", "user")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr
    assert (home / ".claude.json").read_text() == "{broken"
    assert not (home / ".claude" / "skills").exists()


def test_the_shared_agents_skills_sit_beside_the_users_own_and_are_reported(project, home):
    # .agents/skills is shared by every Agent Skills client: other skills there stay untouched
    own = project / ".agents" / "skills" / "my-skill" / "SKILL.md"
    own.parent.mkdir(parents=True)
    own.write_text("---\nname: my-skill\ndescription: mine\n---\nbody\n")
    changed, out = do_install("gemini", "project", project, home, dry_run=True)
    assert f"would create: {project.resolve() / '.agents' / 'skills' / 'ml-training-triage' / 'SKILL.md'}" in out
    assert not (project / ".agents" / "skills" / "ml-training-triage").exists()

    changed, out = do_install("gemini", "project", project, home)
    assert f"{project.resolve() / '.gemini' / 'skills'}, {project.resolve() / '.agents' / 'skills'}" in out
    assert own.read_text().startswith("---\nname: my-skill")
    assert sorted(p.name for p in (project / ".agents" / "skills").iterdir()) == sorted(
        ["my-skill", *(p.name for p in SKILLS_DIR.iterdir() if (p / "SKILL.md").is_file())])

    # a second client shares the same copy: nothing there is rewritten
    before = snapshot(project / ".agents")
    do_install("claude", "project", project, home)
    assert snapshot(project / ".agents") == before
