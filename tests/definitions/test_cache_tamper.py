"""A cached spec is used only if it matches its recorded digests; a tampered one is rebuilt and counted.

The attack: edit the cached controller spec so ``renew`` no longer runs the ``fence`` guard, then
renew with a stale credential through the real ``corral`` executable. It must still be refused
``fence_stale``, the entry must be rebuilt from the YAML, and ``corral status`` must report it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from runner.agents.kinds import Kinds
from runner.cache import ContentCache, rebuilds
from runner.definitions.library import Library

SHA = hashlib.sha256(b"authority").hexdigest()


def corral(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "corral"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def controller_entry(home: Path) -> Path:
    found = [p for p in (home / "cache" / "specs").glob("*.json") if b'"machine": "controller"' in p.read_bytes()]
    assert len(found) == 1, found
    return found[0]


def drop_renew_fence(body: dict[str, object]) -> dict[str, object]:
    transitions = body["transitions"]
    assert isinstance(transitions, list)
    renews = [t for t in transitions if t["trigger"] == "renew"]
    assert renews and all("fence" in json.dumps(t["guards"]) for t in renews)
    for t in renews:
        t["guards"] = [g for g in t["guards"] if (g if isinstance(g, str) else g["name"]) != "fence"]
    return body


def test_tampered_spec_cache_cannot_drop_the_fence_guard(cli_env: dict[str, str], home: Path) -> None:
    acquired = corral(
        cli_env, "controller", "acquire", "--controller", "ctl", "--authority-ref", "T-1", "--authority-sha256", SHA,
        "--json",
    )  # fmt: skip
    assert acquired.returncode == 0, acquired.stderr
    stale = home / "stale.json"
    cred = home / "credentials" / "ctl.json"
    stale.write_bytes(cred.read_bytes())
    stale.chmod(0o600)
    resumed = corral(cli_env, "controller", "resume", "--controller", "ctl", "--json")
    assert resumed.returncode == 0, resumed.stderr

    entry = controller_entry(home)
    head, newline, body = entry.read_bytes().partition(b"\n")
    if not newline:  # an entry without a header line (format 1): the whole file is the body
        head, body = b"", head
    tampered = json.dumps(drop_renew_fence(json.loads(body))).encode()
    entry.write_bytes(head + newline + tampered)  # a hand edit: the header's digest is the old body's

    renew = corral(cli_env, "controller", "renew", "--controller", "ctl", "--credential", str(stale), "--json")
    assert renew.returncode == 4, renew.stdout + renew.stderr
    assert json.loads(renew.stdout)["error"]["code"] == "fence_stale"
    assert tampered not in entry.read_bytes(), "the tampered entry was not overwritten"
    assert b'"fence"' in entry.read_bytes()

    status = corral(cli_env, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["cache"] == {"rebuilt": 1, "by_cache": {"specs": 1}}
    text = corral(cli_env, "status")
    assert "cache: 1 damaged or tampered entries rebuilt from source (specs 1)" in text.stdout

    fresh = corral(cli_env, "controller", "renew", "--controller", "ctl", "--json")
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(corral(cli_env, "status", "--json").stdout)["cache"]["rebuilt"] == 1, "a good entry is used"


def test_entry_filed_under_another_key_or_without_header_is_rebuilt(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache" / "specs"
    machine = Path(__file__).resolve().parents[2] / "machines" / "controller.yaml"
    library = Library(cache_dir=cache_dir)
    spec = library.load(machine)
    (entry,) = cache_dir.glob("*.json")
    good = entry.read_bytes()
    # A whole, self-consistent entry for another source copied over this one's name.
    other = ContentCache(cache_dir)
    other.put("0" * 64, json.loads(good.partition(b"\n")[2]))
    entry.write_bytes((cache_dir / f"{'0' * 64}.json").read_bytes())
    assert Library(cache_dir=cache_dir).load(machine) == spec
    assert entry.read_bytes() == good
    entry.write_bytes(good.partition(b"\n")[2])  # the body alone, as format 1 wrote it
    assert Library(cache_dir=cache_dir).load(machine) == spec
    assert rebuilds(tmp_path / "cache") == {"specs": 2}


def test_tampered_agents_config_cache_is_rebuilt(tmp_path: Path) -> None:
    config = tmp_path / "agents.yaml"
    config.write_text("kinds:\n  mine:\n    argv: [echo, hi]\n")
    cache_dir = tmp_path / "cache" / "config"
    assert Kinds.load([config], cache_dir=cache_dir).get("mine").argv == ("echo", "hi")
    (entry,) = cache_dir.glob("*.json")
    head, _, body = entry.read_bytes().partition(b"\n")
    entry.write_bytes(head + b"\n" + body.replace(b'"hi"', b'"pwned"'))
    assert Kinds.load([config], cache_dir=cache_dir).get("mine").argv == ("echo", "hi")
    assert rebuilds(tmp_path / "cache") == {"config": 1}
