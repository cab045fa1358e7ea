"""Model-based test paths: every route through a machine's transition table (:mod:`.paths`)."""
