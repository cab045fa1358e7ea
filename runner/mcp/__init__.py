"""The MCP surface: ``corral mcp`` serves every coordination operation as a Model Context Protocol tool.

A surface like the CLI: it reaches corral only through the runtime and the service. The official
``mcp`` SDK is imported only here (``corral mcp``), never by the other commands (its import costs most
of a second). See ``docs/mcp.md``.
"""
