"""The store registry: a URL's scheme picks the adapter; plugins join through ``corral.stores``."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

import runner.store
from runner.errors import InputError, StoreUnavailableError
from runner.registry import Registry
from runner.sql.store_sqlite import SQLiteStore
from runner.store import STORES, Clock, Store, StoreOpener, open_store, scheme_of, sqlite_path

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///abs/file.db", Path("/abs/file.db")),
        ("sqlite:////abs/file.db", Path("/abs/file.db")),
        ("sqlite:relative.db", Path("relative.db")),
        ("plain/path.db", Path("plain/path.db")),
        ("postgresql://u@h/db", None),
    ],
)
def test_store_urls(url: str, expected: Path | None) -> None:
    assert sqlite_path(url) == expected


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("sqlite:///abs/file.db", "sqlite"),
        ("sqlite:relative.db", "sqlite"),
        ("plain/path.db", "sqlite"),
        ("/abs/path.db", "sqlite"),
        ("postgresql://u@h/db", "postgresql"),
        ("postgres://u@h/db", "postgresql"),  # libpq's alias: one adapter
        ("my+sql://h/db", "my+sql"),
    ],
)
def test_scheme_of(url: str, scheme: str) -> None:
    assert scheme_of(url) == scheme


@pytest.mark.parametrize(
    ("url", "code", "message"),
    [
        (
            "postgresql://user:secret@/db?schema=Bad-Name",
            "store_url_invalid",
            "store: the schema 'Bad-Name' is not a lowercase identifier ([a-z_][a-z0-9_]*, at most 63)",
        ),
        ("mysql://host/db", "store_url_invalid", "store: unknown store scheme 'mysql' (expected {schemes})"),
        (
            "sqlite:///no/such/directory/x.db",
            "store_url_invalid",
            "store: the directory of the store file does not exist: /no/such/directory",
        ),
        ("sqlite:///", "store_url_invalid", "store: the store URL 'sqlite:///' names no file"),
    ],
)
def test_bad_store_urls(url: str, code: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        open_store(url)
    # Every registered scheme is offered (the test venv has the example plugin's ``example:`` too).
    schemes = ", ".join(f"{name}:" for name in STORES.names())
    assert (caught.value.code, caught.value.message) == (code, message.format(schemes=schemes))
    assert "secret" not in caught.value.message and "secret" not in str(caught.value.details)


def test_sqlite_is_the_built_in_and_opens_a_file(tmp_path: Path) -> None:
    assert STORES.group == "corral.stores"
    entry = STORES.get("sqlite")
    assert entry is not None and entry.summary.startswith("One SQLite file")
    with open_store(str(tmp_path / "bare.db")) as store:
        assert isinstance(store, SQLiteStore) and store.path == tmp_path / "bare.db"
    assert (tmp_path / "bare.db").exists()


def test_open_store_resolves_through_the_registry_with_url_and_clock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, Clock | None]] = []
    real = SQLiteStore(tmp_path / "real.db")

    def open_memo(url: str, clock: Clock | None = None) -> Store:
        """A stand-in adapter."""
        calls.append((url, clock))
        return real

    registry: Registry[StoreOpener] = Registry("store", "corral.stores-test-none")
    registry.add("memo", open_memo)
    registry.add("sqlite", STORES.get("sqlite").fn)  # type: ignore[union-attr]
    monkeypatch.setattr(runner.store, "STORES", registry)

    def fixed() -> datetime:
        return datetime(2030, 1, 1, tzinfo=UTC)

    assert open_store("memo://anything", clock=fixed) is real
    assert calls == [("memo://anything", fixed)]
    with pytest.raises(InputError) as caught:
        open_store("nope://x")
    assert caught.value.message == "store: unknown store scheme 'nope' (expected memo:, sqlite:)"
    real.close()


def test_a_plugin_store_loads_from_its_entry_point_on_a_miss(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What issue 16's PostgreSQL adapter does: one module plus an entry in ``corral.stores``."""
    point = EntryPoint(name="postgresql", value="tests.support.stores:open_alias", group="corral.stores")
    seen: list[str] = []

    def entry_points(**selection: Any) -> list[EntryPoint]:
        seen.append(selection["group"])
        return [point] if selection["group"] == "corral.stores" else []

    monkeypatch.setattr("importlib.metadata.entry_points", entry_points)
    registry: Registry[StoreOpener] = Registry("store", "corral.stores")
    registry.add("sqlite", STORES.get("sqlite").fn)  # type: ignore[union-attr]
    monkeypatch.setattr(runner.store, "STORES", registry)
    with open_store("sqlite://" + str(tmp_path / "a.db")):
        assert seen == [], "a built-in scheme does not scan the entry points"
    with open_store(f"postgresql://{tmp_path / 'b.db'}") as store:
        assert seen == ["corral.stores"]
        assert isinstance(store, SQLiteStore) and store.path == tmp_path / "b.db"


def test_naming_a_store_imports_no_driver() -> None:
    """``runner.store`` (the port and the registry) loads neither sqlite3 nor an adapter."""
    probe = (
        "import sys, runner.store, runner.agents.slots\n"
        "adapters = ('sqlite3', 'runner.sql.store_sqlite', 'runner.sql.slots_sqlite')\n"
        "print(sorted(m for m in adapters if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO)},
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_an_unreachable_postgresql_server_is_store_unavailable_naming_it_without_the_password(scheme: str) -> None:
    url = f"{scheme}://user:secret@/corraldb?host=/nonexistent/socket&schema=team"
    with pytest.raises(StoreUnavailableError) as caught:
        open_store(url)
    error = caught.value
    assert error.code == "store_unavailable" and error.status.exit == 5
    assert error.details == {"server": "/nonexistent/socket:5432/corraldb", "schema": "team"}
    assert "postgresql /nonexistent/socket:5432/corraldb schema team" in error.message
    assert "secret" not in error.message and "secret" not in str(error.details)
