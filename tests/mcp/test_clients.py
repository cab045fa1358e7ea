"""``corral mcp config``: each client's file per scope, careful merges, refusals, and the real CLI.

Files are real files in tmp dirs; TOML results are read back with tomllib and JSON with json, so a
merge that a client could not read fails here.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from runner.errors import CorralError
from runner.mcp import clients
from tests.support.runs import Run

WORKTREE = Path(__file__).resolve().parents[2]
CORRAL = "/opt/corral/bin/corral"
ARGS = ["mcp"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A user's environment with every client's home in the tmp dir and no overrides set."""
    home = tmp_path / "user"
    home.mkdir()
    return {"HOME": str(home)}


def setup(client: str, scope: str, directory: Path, env: dict[str, str], args: list[str] | None = None) -> Any:
    return clients.plan(client, scope, CORRAL, ARGS if args is None else args, directory=directory, environ=env)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def identity(path: Path) -> tuple[int, int, bytes]:
    """What a rewrite would change even with the same bytes: inode and mtime, and the bytes."""
    info = path.stat()
    return info.st_ino, info.st_mtime_ns, path.read_bytes()


# --- each client and scope, into new files -------------------------------------------------------------

EXPECTED = {
    "claude-code": {"mcpServers": {"corral": {"type": "stdio", "command": CORRAL, "args": ["mcp"]}}},
    "codex": {"mcp_servers": {"corral": {"command": CORRAL, "args": ["mcp"]}}},
    "opencode": {
        "$schema": "https://opencode.ai/config.json",
        "mcp": {"corral": {"type": "local", "command": [CORRAL, "mcp"], "enabled": True}},
    },
}


def read_config(path: Path) -> Any:
    text = path.read_text()
    return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)


@pytest.mark.parametrize(
    ("client", "scope", "where", "mode"),
    [
        ("claude-code", "project", "project/.mcp.json", 0o644),
        ("claude-code", "user", "user/.claude.json", 0o600),
        ("codex", "project", "project/.codex/config.toml", 0o644),
        ("codex", "user", "user/.codex/config.toml", 0o644),
        ("opencode", "project", "project/opencode.json", 0o644),
        ("opencode", "user", "user/.config/opencode/opencode.json", 0o644),
    ],
)
def test_a_new_file_per_client_and_scope(
    client: str, scope: str, where: str, mode: int, tmp_path: Path, env: dict[str, str]
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    plan = setup(client, scope, project, env)
    assert plan.path == tmp_path / where
    outcome = clients.write(plan)
    assert (outcome.written, outcome.changed) == (True, True)
    assert read_config(plan.path) == EXPECTED[client]
    assert mode_of(plan.path) == mode
    assert plan.path.read_text().endswith("\n")
    # The printed snippet is the same document (what a user pastes into a new file).
    snippet = plan.snippet()
    assert (tomllib.loads(snippet) if client == "codex" else json.loads(snippet)) == EXPECTED[client]


def test_the_user_files_follow_the_clients_own_variables(tmp_path: Path, env: dict[str, str]) -> None:
    env = {**env, "CODEX_HOME": str(tmp_path / "codex"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    env["CLAUDE_CONFIG_DIR"] = str(tmp_path / "claude")
    assert setup("codex", "user", tmp_path, env).path == tmp_path / "codex" / "config.toml"
    assert setup("opencode", "user", tmp_path, env).path == tmp_path / "xdg" / "opencode" / "opencode.json"
    assert setup("claude-code", "user", tmp_path, env).path == tmp_path / "claude" / ".claude.json"
    # XDG says a relative XDG_CONFIG_HOME is invalid and to be ignored.
    relative = {**env, "XDG_CONFIG_HOME": "relative/xdg"}
    assert setup("opencode", "user", tmp_path, relative).path == Path(env["HOME"]) / ".config/opencode/opencode.json"


def test_user_scope_creates_missing_directories_private(tmp_path: Path, env: dict[str, str]) -> None:
    plan = setup("codex", "user", tmp_path, env)
    clients.write(plan)
    assert mode_of(plan.path.parent) == 0o700
    assert read_config(plan.path) == EXPECTED["codex"]


def test_the_cli_offers_exactly_the_known_clients_and_scopes() -> None:
    from runner.cli import mcp

    assert tuple(clients.CLIENTS) == mcp.CLIENTS
    assert clients.SCOPES == mcp.SCOPES


def test_unknown_client_or_scope_is_input_invalid(tmp_path: Path, env: dict[str, str]) -> None:
    for client, scope in (("cursor", "project"), ("codex", "global")):
        with pytest.raises(CorralError) as caught:
            setup(client, scope, tmp_path, env)
        assert caught.value.code == "input_invalid"


# --- merging into existing files -----------------------------------------------------------------------


def test_json_merge_keeps_other_servers_and_keys(tmp_path: Path, env: dict[str, str]) -> None:
    path = Path(env["HOME"]) / ".claude.json"
    before = {
        "numStartups": 12,
        "projects": {"/src/x": {"allowedTools": ["Bash"], "mcpServers": {}}},
        "mcpServers": {"other": {"type": "stdio", "command": "/usr/bin/other", "args": []}},
        "theme": "dark ☾",
    }
    path.write_text(json.dumps(before, indent=4))
    path.chmod(0o640)
    outcome = clients.write(setup("claude-code", "user", tmp_path, env))
    assert outcome.changed
    after = json.loads(path.read_text())
    assert list(after) == list(before)  # order kept: the entry is set in place
    assert {k: v for k, v in after.items() if k != "mcpServers"} == {
        k: v for k, v in before.items() if k != "mcpServers"
    }
    assert after["mcpServers"] == {**before["mcpServers"], "corral": EXPECTED["claude-code"]["mcpServers"]["corral"]}
    assert mode_of(path) == 0o640  # the existing file's mode, not the default of a new one
    text = path.read_text()
    assert "dark ☾" in text and text.endswith("}\n") and '\n  "numStartups"' in text


def test_json_merge_replaces_an_old_corral_entry_and_adds_the_section(tmp_path: Path, env: dict[str, str]) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "opencode.json").write_text(
        json.dumps({"model": "x/y", "mcp": {"corral": {"type": "local", "command": ["/old/corral", "mcp"]}}})
    )
    clients.write(setup("opencode", "project", project, env))
    after = json.loads((project / "opencode.json").read_text())
    assert after == {"model": "x/y", "mcp": EXPECTED["opencode"]["mcp"]}  # no $schema forced into a user's file
    (project / ".mcp.json").write_text('{"other": true}')
    clients.write(setup("claude-code", "project", project, env))
    assert json.loads((project / ".mcp.json").read_text()) == {"other": True, **EXPECTED["claude-code"]}


TOML_BEFORE = """\
# my codex settings
model = "o3"  # keep this comment
approval_policy = "on-request"

[mcp_servers.other]
command = "npx"
args = ["-y", "other-server"]

[mcp_servers.corral]
command = "/old/bin/corral"
args = ["mcp"]
startup_timeout_sec = 20

[mcp_servers.corral.env]
FOO = "bar"

# --- profiles ---
[profiles.fast]
model = "o4-mini"
"""

TOML_AFTER = f"""\
# my codex settings
model = "o3"  # keep this comment
approval_policy = "on-request"

[mcp_servers.other]
command = "npx"
args = ["-y", "other-server"]

[mcp_servers.corral]
command = "{CORRAL}"
args = ["mcp"]

# --- profiles ---
[profiles.fast]
model = "o4-mini"
"""


def test_toml_merge_replaces_only_the_corral_table_and_its_sub_tables(tmp_path: Path, env: dict[str, str]) -> None:
    path = Path(env["HOME"]) / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(TOML_BEFORE)
    outcome = clients.write(setup("codex", "user", tmp_path, env))
    assert outcome.changed
    assert path.read_text() == TOML_AFTER  # every other line byte for byte, comments included
    doc = tomllib.loads(path.read_text())
    assert doc["mcp_servers"]["corral"] == {"command": CORRAL, "args": ["mcp"]}
    assert doc["mcp_servers"]["other"] == {"command": "npx", "args": ["-y", "other-server"]}
    assert doc["profiles"] == {"fast": {"model": "o4-mini"}}


def test_toml_merge_appends_when_absent_and_keeps_the_file_before_it(tmp_path: Path, env: dict[str, str]) -> None:
    project = tmp_path / "p"
    (project / ".codex").mkdir(parents=True)
    path = project / ".codex" / "config.toml"
    original = '[mcp_servers."other"]\r\ncommand = "x"\r\n[[skills]]\r\nname = "a"'  # CRLF, no final newline
    path.write_bytes(original.encode())
    clients.write(setup("codex", "project", project, env, args=["--home", '/st ate/"q"', "mcp"]))
    data = path.read_bytes().decode()
    assert data.startswith(original + "\r\n\r\n[mcp_servers.corral]\r\n")
    doc = tomllib.loads(data)
    assert doc["mcp_servers"]["corral"] == {"command": CORRAL, "args": ["--home", '/st ate/"q"', "mcp"]}
    assert doc["mcp_servers"]["other"] == {"command": "x"} and doc["skills"] == [{"name": "a"}]


def test_toml_merge_with_quoted_and_spaced_headers(tmp_path: Path, env: dict[str, str]) -> None:
    path = Path(env["HOME"]) / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('[ mcp_servers . "corral" ]  # mine\ncommand = "old"\n[mcp_servers.corral.tools.x]\nok = 1\n')
    clients.write(setup("codex", "user", tmp_path, env))
    assert path.read_text() == f'[mcp_servers.corral]\ncommand = "{CORRAL}"\nargs = ["mcp"]\n'


def test_toml_an_inline_corral_definition_is_refused_untouched(tmp_path: Path, env: dict[str, str]) -> None:
    path = Path(env["HOME"]) / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('[mcp_servers]\ncorral = { command = "old", args = [] }\n')
    before = identity(path)
    with pytest.raises(CorralError) as caught:
        clients.write(setup("codex", "user", tmp_path, env))
    assert caught.value.code == "config_unmergeable"
    assert caught.value.details["path"] == str(path)
    assert "[mcp_servers.corral]" in caught.value.message  # it says what to put there by hand
    assert identity(path) == before
    assert os.listdir(path.parent) == ["config.toml"]  # no temporary file left behind


# --- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("client", "name", "text", "line", "column"),
    [
        ("claude-code", ".mcp.json", '{\n  "mcpServers": {\n    "a": 1,\n  }\n}\n', 4, 3),
        ("opencode", "opencode.json", '{\n  // a JSONC comment\n  "mcp": {}\n}\n', 2, 3),
        ("codex", ".codex/config.toml", 'model = "o3"\n[mcp_servers.x]\ncommand = \n', 3, 11),
    ],
)
def test_an_invalid_existing_file_is_refused_and_untouched(
    client: str, name: str, text: str, line: int, column: int, tmp_path: Path, env: dict[str, str]
) -> None:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    before = identity(path)
    with pytest.raises(CorralError) as caught:
        clients.write(setup(client, "project", tmp_path, env))
    error = caught.value
    assert error.code == "config_invalid"
    assert (error.details["path"], error.details["line"], error.details["column"]) == (str(path), line, column)
    assert f"{path}:{line}:" in error.message
    assert identity(path) == before


@pytest.mark.parametrize("text", ["[1, 2]\n", '{"mcpServers": ["corral"]}\n', b"\xff\xfe{}".decode("latin-1")], ids=str)
def test_a_json_file_of_the_wrong_shape_is_refused(text: str, tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / ".mcp.json"
    path.write_bytes(text.encode("latin-1"))
    before = identity(path)
    with pytest.raises(CorralError) as caught:
        clients.write(setup("claude-code", "project", tmp_path, env))
    assert caught.value.code == "config_invalid"
    assert identity(path) == before


def test_a_config_path_that_is_a_directory_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / ".mcp.json").mkdir()
    with pytest.raises(CorralError) as caught:
        clients.write(setup("claude-code", "project", tmp_path, env))
    assert caught.value.code == "config_invalid"
    assert (tmp_path / ".mcp.json").is_dir()


def test_a_directory_that_cannot_be_made_is_config_unwritable(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / ".codex").write_text("not a directory\n")
    with pytest.raises(CorralError) as caught:
        clients.write(setup("codex", "project", tmp_path, env))
    assert caught.value.code == "config_unwritable"
    assert (tmp_path / ".codex").read_text() == "not a directory\n"


def test_an_empty_json_file_is_an_empty_configuration(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / ".mcp.json").write_text("\n")
    assert clients.write(setup("claude-code", "project", tmp_path, env)).changed
    assert json.loads((tmp_path / ".mcp.json").read_text()) == EXPECTED["claude-code"]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://corral:s3cret-pw@db.example/corral",
        "postgresql://db.example/corral?sslmode=require&password=s3cret-pw",
        "postgresql://corral:s3cret-pw@[::1/corral",  # a netloc urlsplit refuses
    ],
)
def test_a_store_url_with_a_password_is_refused(url: str) -> None:
    with pytest.raises(CorralError) as caught:
        clients.server_args(store=url)
    error = caught.value
    assert error.code == "store_url_password"
    assert error.status.exit == 3
    assert "s3cret-pw" not in json.dumps(error.to_dict())  # the secret is not repeated in the error


def test_server_args_pass_home_and_store_on_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert clients.server_args() == ["mcp"]
    assert clients.server_args(home="state") == ["--home", str(tmp_path / "state"), "mcp"]
    assert clients.server_args(store="sqlite:x.db") == ["--store", f"sqlite://{tmp_path / 'x.db'}", "mcp"]
    assert clients.server_args(store="db/y.db")[1] == f"sqlite://{tmp_path / 'db/y.db'}"
    assert clients.server_args(store="sqlite:////abs/z.db")[1] == "sqlite:////abs/z.db"
    passwordless = "postgresql://corral@db.example/corral?sslmode=require"
    assert clients.server_args(store=passwordless) == ["--store", passwordless, "mcp"]


# --- idempotence, symlinks -----------------------------------------------------------------------------


@pytest.mark.parametrize("client", ["claude-code", "codex", "opencode"])
def test_saying_it_twice_changes_nothing(client: str, tmp_path: Path, env: dict[str, str]) -> None:
    plan = setup(client, "project", tmp_path, env)
    assert clients.write(plan).changed
    before = identity(plan.path)
    outcome = clients.write(plan)
    assert (outcome.written, outcome.changed) == (False, False)
    assert identity(plan.path) == before  # not even rewritten with the same bytes


def test_an_equal_entry_in_a_file_formatted_otherwise_is_left_alone(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"a": 1, **EXPECTED["claude-code"]}, indent=8))
    before = identity(path)
    assert not clients.write(setup("claude-code", "project", tmp_path, env)).changed
    assert identity(path) == before


def test_a_symlinked_config_is_written_through(tmp_path: Path, env: dict[str, str]) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "claude.json"
    real.write_text('{"theme": "light"}\n')
    real.chmod(0o600)
    link = Path(env["HOME"]) / ".claude.json"
    link.symlink_to(real)
    clients.write(setup("claude-code", "user", tmp_path, env))
    assert link.is_symlink() and link.resolve() == real  # the link is kept
    assert json.loads(real.read_text()) == {"theme": "light", **EXPECTED["claude-code"]}
    assert mode_of(real) == 0o600


# --- the executable and the project directory ----------------------------------------------------------


def test_the_console_script_beside_python_comes_first(tmp_path: Path) -> None:
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").touch()
    script = bindir / "corral"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert clients.corral_executable(str(bindir / "python"), which=lambda _: "/elsewhere/corral") == str(script)
    script.chmod(0o644)  # not executable: not a console script
    assert clients.corral_executable(str(bindir / "python"), which=lambda _: "/elsewhere/corral") == "/elsewhere/corral"


def test_no_installed_corral_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(CorralError) as caught:
        clients.corral_executable(str(tmp_path / "python"), which=lambda _: None)
    assert caught.value.code == "corral_not_installed"
    assert "install" in caught.value.message
    assert caught.value.details["searched"] == [str(tmp_path / "corral"), "PATH"]


def test_the_project_directory_is_the_git_top_level(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    assert clients.default_dir(repo / "src" / "deep") == repo
    linked = tmp_path / "linked"  # a linked worktree has a .git *file*
    (linked / "pkg").mkdir(parents=True)
    (linked / ".git").write_text(f"gitdir: {repo}/.git/worktrees/linked\n")
    assert clients.default_dir(linked / "pkg") == linked
    outside = tmp_path / "plain"
    outside.mkdir()
    if not any((p / ".git").exists() for p in (outside, *outside.parents)):
        assert clients.default_dir(outside) == outside


# --- the real CLI --------------------------------------------------------------------------------------


@pytest.fixture
def corral(cli_env: dict[str, str], tmp_path: Path) -> Any:
    """``python -m runner.cli`` of this worktree, with HOME and the clients' variables in tmp dirs."""
    user = tmp_path / "cli-user"
    user.mkdir(exist_ok=True)
    env = {**cli_env, "PYTHONPATH": str(WORKTREE), "HOME": str(user)}
    for name in ("CODEX_HOME", "XDG_CONFIG_HOME", "CLAUDE_CONFIG_DIR", "CORRAL_STORE"):
        env.pop(name, None)

    def run(*args: str, cwd: Path = tmp_path) -> Run:
        proc = subprocess.run(
            [sys.executable, "-m", "runner.cli", *args],
            capture_output=True, text=True, env=env, cwd=cwd, timeout=60, check=False,
        )  # fmt: skip
        return Run(proc)

    run.home = cli_env["CORRAL_HOME"]  # type: ignore[attr-defined]
    run.user = user  # type: ignore[attr-defined]
    return run


INSTALLED = str(Path(sys.executable).parent / "corral")


def test_cli_claude_code_project_json(corral: Any, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    run = corral("mcp", "config", "--client", "claude-code", "--write", "--json", cwd=project / "sub")
    assert run.code == 0, run.err
    doc = run.json()
    args = ["--home", corral.home, "mcp"]  # CORRAL_HOME of the caller is passed on
    entry = {"type": "stdio", "command": INSTALLED, "args": args}
    assert doc == {
        "client": "claude-code",
        "scope": "project",
        "path": str(project / ".mcp.json"),
        "command": INSTALLED,
        "args": args,
        "config": entry,
        "written": True,
        "changed": True,
    }
    assert json.loads((project / ".mcp.json").read_text()) == {"mcpServers": {"corral": entry}}
    again = corral("mcp", "config", "--client", "claude-code", "--write", "--json", cwd=project / "sub").json()
    assert (again["written"], again["changed"]) == (False, False)


def test_cli_codex_user_toml(corral: Any, tmp_path: Path) -> None:
    state = tmp_path / "other-state"
    run = corral("--home", str(state), "mcp", "config", "--client", "codex", "--scope", "user", "--write", "--json")
    assert run.code == 0, run.err
    doc = run.json()
    path = corral.user / ".codex" / "config.toml"
    assert (doc["path"], doc["written"], doc["changed"]) == (str(path), True, True)
    assert doc["args"] == ["--home", str(state), "mcp"]  # the command line's --home wins over CORRAL_HOME
    assert tomllib.loads(path.read_text()) == {"mcp_servers": {"corral": {"command": INSTALLED, "args": doc["args"]}}}
    assert doc["config"] == {"command": INSTALLED, "args": doc["args"]}


def test_cli_opencode_project_prints_without_writing(corral: Any, tmp_path: Path) -> None:
    project = tmp_path / "oc"
    project.mkdir()
    run = corral("mcp", "config", "--client", "opencode", "--dir", str(project), "--json")
    assert run.code == 0, run.err
    doc = run.json()
    assert doc["path"] == str(project / "opencode.json")
    assert doc["config"] == {"type": "local", "command": [INSTALLED, "--home", corral.home, "mcp"], "enabled": True}
    assert (doc["written"], doc["changed"]) == (False, False)
    assert not (project / "opencode.json").exists()
    text = corral("mcp", "config", "--client", "opencode", "--dir", str(project))
    assert text.code == 0
    assert json.loads(text.out)["mcp"]["corral"] == doc["config"]  # stdout is the pasteable snippet alone
    assert str(project / "opencode.json") in text.err
    wrote = corral("mcp", "config", "--client", "opencode", "--dir", str(project), "--write")
    assert wrote.out.rstrip().endswith(f"wrote {project / 'opencode.json'}")


def test_cli_refusals_have_codes_and_statuses(corral: Any, tmp_path: Path) -> None:
    secret = corral("--store", "postgresql://u:hunter2@db/x", "mcp", "config", "--client", "codex", "--json")
    assert (secret.code, secret.error_code()) == (3, "store_url_password")
    assert "hunter2" not in secret.out + secret.err
    (tmp_path / ".mcp.json").write_text("{oops")
    bad = corral("mcp", "config", "--client", "claude-code", "--dir", str(tmp_path), "--write", "--json")
    assert (bad.code, bad.error_code()) == (3, "config_invalid")
    assert bad.json()["error"]["details"]["line"] == 1
    assert (tmp_path / ".mcp.json").read_text() == "{oops"
    usage = corral("mcp", "config", "--client", "codex", "--scope", "user", "--dir", str(tmp_path), "--json")
    assert (usage.code, usage.error_code()) == (2, "usage")
    mixed = corral("mcp", "--http", "config", "--client", "codex")
    assert mixed.code == 2 and "do not go with" in mixed.err
    assert "Traceback" not in secret.err + bad.err + usage.err + mixed.err
