"""corral's version, kept in one place (read by the build and at run time without importlib.metadata)."""

__version__ = "0.1.0"
