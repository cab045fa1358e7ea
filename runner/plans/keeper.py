"""Credential keepers for plans: where the controller's credential lives between steps."""

from __future__ import annotations

from pathlib import Path

from runner import credentials
from runner.errors import CredentialError
from runner.fence import Credential


class FileKeeper:
    """The CLI's keeper: the state home's 0600 credential files (shared with ``corral controller``)."""

    def __init__(self, directory: Path, store_url: str | credentials.StoreRef) -> None:
        self.directory = directory
        self.store_url = store_url

    def load(self, controller_id: str) -> Credential | None:
        try:
            return credentials.load(credentials.path_for(self.directory, controller_id), controller_id, self.store_url)
        except CredentialError as exc:
            if exc.code == "credential_missing":
                return None
            raise

    def save(self, credential: Credential) -> None:
        # A plan re-granting a bound credential keeps it bound: it passed the binding check to load it.
        path = credentials.path_for(self.directory, credential.controller_id)
        credentials.save(path, credential, self.store_url, keep_binding=True)

    def remove(self, controller_id: str, held: Credential | None = None) -> None:
        """Forget the credential; with ``held``, only if the file still holds that grant."""
        path = credentials.path_for(self.directory, controller_id)
        if held is None:
            credentials.remove(path)
        else:
            credentials.discard(path, controller_id, self.store_url, held)


class MemoryKeeper:
    """A keeper in memory (tests, embedding): nothing touches the disk."""

    def __init__(self) -> None:
        self._held: dict[str, Credential] = {}

    def load(self, controller_id: str) -> Credential | None:
        return self._held.get(controller_id)

    def save(self, credential: Credential) -> None:
        self._held[credential.controller_id] = credential

    def remove(self, controller_id: str, held: Credential | None = None) -> None:
        if held is None or self._held.get(controller_id) == held:
            self._held.pop(controller_id, None)
