"""Every MCP tool, in the order a client lists them: the coordinators', then the handoff memory's
(``corral_memory_*``) and the agent mesh's (``corral_mesh_*``), each registered by its module's
import into :data:`runner.mcp.tool.TOOLS`. Every name is ``corral_`` and its CLI command's words
(docs/mcp.md, "Names"); the names of the release before are :data:`runner.mcp.tool.DEPRECATED_TOOLS`.
"""

from __future__ import annotations

from runner.mcp import corral_tools as _corral_tools  # noqa: F401 - registers the coordinators' tools
from runner.mcp import memory_tools as _memory_tools  # noqa: F401 - registers the handoff memory's tools
from runner.mcp import mesh as _mesh  # noqa: F401 - registers the agent mesh's tools
from runner.mcp.tool import DATA_NOTICE, TOOLS, Tool

__all__ = ["DATA_NOTICE", "TOOLS", "Tool"]
