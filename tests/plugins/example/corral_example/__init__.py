"""corral's extension points, one worked example each (see docs/architecture.md, "Extension points").

- a guard, an update and an effect (:mod:`.definitions`), named from a machine's YAML;
- a step operation (:mod:`.operations`), named from a recipe's ``do:``;
- an agent host (:mod:`.hosts`), named by ``--host``;
- a store (:mod:`.stores`), named by a ``--store`` URL's scheme (with the process host's slot port).
"""
