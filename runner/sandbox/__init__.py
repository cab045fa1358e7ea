"""Sandboxed execution: Bubblewrap (``bwrap``) and host validation of writer lanes (``validation``)."""
