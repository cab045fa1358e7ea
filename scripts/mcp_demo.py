"""``make demo``'s MCP part: a scripted client drives ``corral mcp`` over stdio, as a coordinator would.

The MCP SDK's own client (``mcp.Client`` over ``StdioServerParameters``) starts ``corral mcp`` (the
``corral`` on PATH, else ``python -m runner.cli``) with the demo's ``CORRAL_HOME`` and, step by step:
lists the tools, acquires a controller lease through ``corral_controller_acquire`` (its own
controller id, ``mcp-demo``, so the demo's other leases are left alone), reads ``corral_status``,
renews and releases. It shows that no result carries the lease's token: the server keeps the
credential in the state home, and the client only names the controller.

Exit status 0, or 1 with the refusal's code and message (never a traceback).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

CONTROLLER = "mcp-demo"
AUTHORITY = "ISSUE-14: the MCP server"
CHECKPOINT = "mcp demo checkpoint"


class Refused(Exception):
    """A tool answered with ``isError``: its code and message."""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def server_command() -> tuple[str, list[str]]:
    """``corral mcp`` as a coordinator's configuration names it: the installed console script."""
    beside = Path(sys.executable).parent / "corral"
    found = str(beside) if beside.is_file() else shutil.which("corral")
    if found is not None:
        return found, ["mcp"]
    return sys.executable, ["-m", "runner.cli", "mcp"]


def show(text: str) -> None:
    print(text, flush=True)


def lease_line(lease: dict[str, Any]) -> str:
    return (
        f"controller {lease['controller_id']}: {lease['state']}, generation {lease['generation']},"
        f" expires {lease['expires_at']}"
    )


async def demo(credential: Path) -> tuple[list[str], str]:
    """Run the steps; returns every result's text as the client received it, and the lease's token."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    command, args = server_command()
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    results: list[str] = []

    async def call(client: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(name, arguments)
        content: dict[str, Any] = result.structured_content or {}
        results.append(json.dumps(content) + "".join(getattr(c, "text", "") for c in result.content))
        if result.is_error:
            error = content.get("error", {})
            raise Refused(f"{name} refused: {error.get('code')}: {error.get('message')}")
        return content

    show(f"-> starting {Path(command).name} {' '.join(args)} over stdio (CORRAL_HOME={os.environ.get('CORRAL_HOME')})")
    async with Client(params) as client:
        listed = (await client.list_tools()).tools
        names = sorted(tool.name for tool in listed)
        read_only = sum(1 for tool in listed if tool.annotations and tool.annotations.read_only_hint)
        show(f"-> tools/list: {len(names)} tools ({read_only} read-only), among them:")
        for name in ("corral_controller_acquire", "corral_relay", "corral_wait_any", "corral_status"):
            if name in names:
                tool = next(t for t in listed if t.name == name)
                show(f"     {name}: {tool.title}")

        acquire = {"controller": CONTROLLER, "authority_ref": AUTHORITY, "authority_sha256": sha(AUTHORITY), "ttl": 300}
        lease = (await call(client, "corral_controller_acquire", acquire))["lease"]
        show(f"-> corral_controller_acquire: {lease_line(lease)}")
        token = str(json.loads(credential.read_text(encoding="utf-8"))["token"])  # the fence, kept by the server
        show(f"     the credential is in {credential} (mode {credential.stat().st_mode & 0o777:o}), not in the result")

        status = await call(client, "corral_status", {})
        counts = ", ".join(
            f"{machine} {'/'.join(f'{n} {state}' for state, n in sorted(states.items()))}"
            for machine, states in sorted(status.get("counts", {}).items())
        )
        show(
            f"-> corral_status: corral {status['version']}, store {status['store'].get('adapter')}; {counts or 'empty'}"
        )
        for entry in status.get("locks", {}).get("controllers", []):
            show(f"     controller {entry.get('controller_id')}: {entry.get('lock')} ({entry.get('why')})")

        renewed = (await call(client, "corral_controller_renew", {"controller": CONTROLLER}))["lease"]
        show(f"-> corral_controller_renew: {lease_line(renewed)} (same generation: the fence is unchanged)")

        release = {"controller": CONTROLLER, "checkpoint_ref": CHECKPOINT, "checkpoint_sha256": sha(CHECKPOINT)}
        released = (await call(client, "corral_controller_release", release))["lease"]
        show(
            f"-> corral_controller_release: controller {released['controller_id']}: {released['state']} at"
            f" {released.get('released_at')}, checkpoint {released.get('checkpoint_ref')!r}"
        )
    return results, token


def main() -> int:
    import anyio

    credential = Path(os.environ["CORRAL_HOME"]) / "credentials" / f"{CONTROLLER}.json"
    try:
        results, token = anyio.run(demo, credential)
    except Refused as exc:
        print(f"mcp demo: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a demo reports what went wrong in one line, not a traceback
        print(f"mcp demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if any(token in text for text in results):
        print("mcp demo: a tool result carried the lease's token", file=sys.stderr)
        return 1
    gone = "removed on release" if not credential.exists() else "still there"
    show(f"-> none of the {len(results)} results carried the token; the credential file is {gone}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
