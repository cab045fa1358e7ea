"""Agent hosts: where agents run (``abc`` the interface; ``process`` and ``herdr`` the adapters)."""
