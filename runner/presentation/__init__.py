"""Presentation of definitions for review: drawings of machines and recipes (:mod:`.draw`) and the
review pack (:mod:`.pack`). Reads definitions, writes only where the caller says."""
