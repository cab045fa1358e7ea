"""Credential files: 0600, atomic, and every way they can be unusable has its own code."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from runner import credentials
from runner.errors import CredentialError
from runner.fence import Credential

STORE = "sqlite:///tmp/x.db"
CRED = Credential("ctl", "11111111-2222-3333-4444-555555555555", 3, "f" * 32)


def test_round_trip_with_private_modes(tmp_path: Path) -> None:
    path = credentials.path_for(tmp_path / "credentials", "ctl")
    credentials.save(path, CRED, STORE)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert credentials.load(path, "ctl", STORE) == CRED
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == [".ctl.json.lock", "ctl.json"], "no temporary file left behind (the lock file stays)"


def test_overwrite_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, STORE)
    newer = Credential("ctl", CRED.lease_id, 4, "e" * 32)
    credentials.save(path, newer, STORE)
    assert credentials.load(path, "ctl", STORE) == newer


def error_code(path: Path, controller: str = "ctl", store: str = STORE) -> str:
    with pytest.raises(CredentialError) as caught:
        credentials.load(path, controller, store)
    assert CRED.token not in caught.value.message
    return caught.value.code


def test_missing(tmp_path: Path) -> None:
    assert error_code(tmp_path / "nope.json") == "credential_missing"


def test_readable_by_others_is_insecure(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, STORE)
    path.chmod(0o644)
    assert error_code(path) == "credential_insecure"


@pytest.mark.parametrize(
    "content",
    [
        "not json at all",
        "[]",
        json.dumps({"format": 99}),
        json.dumps(
            {"format": 1, "controller_id": "ctl", "lease_id": "x", "generation": "3", "token": "t", "store": STORE}
        ),
        json.dumps(
            {"format": 1, "controller_id": "ctl", "lease_id": "x", "generation": True, "token": "t", "store": STORE}
        ),
        json.dumps({"format": 1, "controller_id": "ctl", "lease_id": "x", "generation": 1, "store": STORE}),
        json.dumps(
            {"format": 1, "controller_id": "other", "lease_id": "x", "generation": 1, "token": "t", "store": STORE}
        ),
    ],
    ids=["garbage", "array", "format", "generation-string", "generation-bool", "no-token", "other-controller"],
)
def test_corrupt(tmp_path: Path, content: str) -> None:
    path = tmp_path / "ctl.json"
    path.write_text(content)
    path.chmod(0o600)
    assert error_code(path) == "credential_corrupt"


def test_issued_by_another_store(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, STORE)
    assert error_code(path, store="sqlite:///elsewhere.db") == "credential_store_mismatch"


def test_remove_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, STORE)
    assert credentials.remove(path) is True
    assert credentials.remove(path) is False


def test_discard_removes_only_the_grant_it_was_given(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    successor = Credential("ctl", "99999999-2222-3333-4444-555555555555", 4, "e" * 32)
    credentials.save(path, successor, STORE)
    assert credentials.discard(path, "ctl", STORE, CRED) is False, "the file holds a successor's grant"
    assert credentials.load(path, "ctl", STORE) == successor
    assert credentials.discard(path, "ctl", STORE, successor) is True
    assert not path.exists()


def test_a_loose_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "creds" / "ctl.json"
    credentials.save(path, CRED, STORE)
    path.parent.chmod(0o755)
    assert error_code(path) == "credential_insecure"
    with pytest.raises(CredentialError):
        credentials.save(path, CRED, STORE)


# --- issue 16: bound to the store's identity, never a password ---------------------------------------

PG = "postgresql://corral:hunter2@db.example:5433/corral?schema=team&sslmode=require&password=hunter3"


def test_a_password_in_the_store_url_never_lands_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, credentials.StoreRef(credentials.canonical_url(PG), "a1b2"))
    text = path.read_text()
    assert "hunter" not in text
    doc = json.loads(text)
    assert doc["store"] == "postgresql://corral@db.example:5433/corral?schema=team&sslmode=require"
    assert doc["store_id"] == "a1b2"
    credentials.save(path, CRED, PG)  # a bare URL too: canonical in the file
    assert "hunter" not in path.read_text()


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (PG, PG.replace("postgresql://", "postgres://", 1)),  # libpq's two spellings are one store
        (PG, PG.replace(":hunter2@", "@", 1)),  # with and without the password
        ("sqlite:///tmp/x.db", "/tmp/x.db"),  # an SQLite URL and its bare path
        ("sqlite:/tmp/../tmp/x.db", "sqlite:///tmp/x.db"),
    ],
)
def test_spellings_of_one_store_are_one_store(tmp_path: Path, written: str, read: str) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, written)
    assert credentials.load(path, "ctl", read) == CRED


def test_the_store_id_decides_when_both_sides_know_one(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, credentials.StoreRef("sqlite:///old/place.db", "id-1"))
    moved = credentials.StoreRef(credentials.canonical_url(PG), "id-1")  # the same store, moved (store migrate)
    assert credentials.load(path, "ctl", moved) == CRED
    other = credentials.StoreRef("sqlite:///old/place.db", "id-2")  # a new store in the same file name
    with pytest.raises(CredentialError) as caught:
        credentials.load(path, "ctl", other)
    error = caught.value
    assert error.code == "credential_store_mismatch"
    assert (error.details["credential_store_id"], error.details["store_id"]) == ("id-1", "id-2")


def test_an_older_file_with_a_password_in_its_url_stays_readable_and_never_echoes_it(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    doc = {"format": 1, "controller_id": "ctl", "lease_id": CRED.lease_id, "generation": 3, "token": CRED.token}
    path.write_text(json.dumps({**doc, "store": PG}))  # as corral wrote it before issue 16
    path.chmod(0o600)
    ref = credentials.StoreRef(credentials.canonical_url(PG), "id-1")
    assert credentials.load(path, "ctl", ref) == CRED, "no store_id in the file: matched by canonical URL"
    elsewhere = credentials.StoreRef("postgresql://corral@other/corral", "id-1")
    with pytest.raises(CredentialError) as caught:
        credentials.load(path, "ctl", elsewhere)
    assert caught.value.code == "credential_store_mismatch"
    assert "hunter" not in caught.value.message + json.dumps(caught.value.details)
    credentials.save(path, CRED, ref)  # the next write is in the new form
    assert "hunter" not in path.read_text() and json.loads(path.read_text())["store_id"] == "id-1"


def test_a_bad_store_id_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "ctl.json"
    credentials.save(path, CRED, STORE)
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "store_id": "../x"}))
    assert error_code(path) == "credential_corrupt"
