"""A minimal MCP server on stdio (newline-delimited JSON-RPC 2.0) for the SDK interop tests: one
tool and one resource, enough for Cursor's SDK to list the server's tools and resources, call the
tool and read the resource. A test fake: it answers only what the tests ask."""
from __future__ import annotations

import json
import sys
from typing import Any

RESOURCE = {"uri": "notes://today", "name": "Today", "mimeType": "text/plain"}
NOTE = "buy milk; call the plumber"


def result(method: str, params: dict[str, Any]) -> Any:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2024-11-05"),
            "capabilities": {"tools": {}, "resources": {}},
            "serverInfo": {"name": "notes", "version": "1.0"},
        }
    if method == "tools/list":
        schema = {"type": "object", "properties": {"day": {"type": "string"}}}
        return {"tools": [{"name": "lookup", "description": "Look up a day's notes.", "inputSchema": schema}]}
    if method == "tools/call":
        day = (params.get("arguments") or {}).get("day", "")
        return {"content": [{"type": "text", "text": f"{day}: {NOTE}"}]}
    if method == "resources/list":
        return {"resources": [RESOURCE]}
    if method == "resources/read":
        return {"contents": [{"uri": params["uri"], "mimeType": "text/plain", "text": NOTE}]}
    if method in ("ping", "resources/templates/list", "prompts/list"):
        return {"resourceTemplates": []} if method == "resources/templates/list" else {"prompts": []} if method == "prompts/list" else {}
    raise LookupError(method)


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        try:
            reply = {"jsonrpc": "2.0", "id": request["id"], "result": result(request["method"], request.get("params") or {})}
        except LookupError:
            reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no method {request['method']}"}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
