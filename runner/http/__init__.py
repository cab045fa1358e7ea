"""The HTTP surface: ``corral serve`` (REST under ``/api``, resumable SSE, the dashboard). See ``docs/http.md``."""
