"""Git preflight with GitPython: the facts a writer lane is gated on (``runner.git.preflight``)."""
