"""Reading documents: YAML with line numbers (:mod:`.yamlsource`) and JSON Schema checks (:mod:`.schema`).

The lowest layer every other one may use: definitions (machines, recipes, plans) and adapters (an
agent host's ``agents.yaml``) load their files through it. It imports nothing of corral but the
error table and the packaged data, so it closes no import circle.
"""
