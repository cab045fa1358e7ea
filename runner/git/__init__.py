"""Git preflight (the git command, run directly): the facts a writer lane is gated on (``runner.git.preflight``)."""
