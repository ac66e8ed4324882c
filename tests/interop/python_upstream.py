#!/usr/bin/env python3
"""An upstream MCP server written with the official Python SDK (PyPI `mcp`, pinned in
requirements.txt), over Streamable HTTP: what the Rust test puts behind `postern serve` to show
Postern is a normal MCP client of servers it did not write.

Usage: python3 tests/interop/python_upstream.py PORT JOURNAL

Serves `http://127.0.0.1:PORT/mcp` with one tool, `create_invoice(customer, amount)`, which
appends every call it applies to JOURNAL as a JSON line with the execution id Postern sent in
`_meta["io.postern/execution-id"]` (so the test can count what the upstream did).
"""

import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer


def main():
    port, journal = int(sys.argv[1]), sys.argv[2]
    server = MCPServer("python-books", version="1.0")

    @server.tool(description="Create an invoice (Python SDK upstream)")
    def create_invoice(customer: str, amount: int, ctx: Context) -> dict:
        meta = ctx.request_context.meta or {}
        if not isinstance(meta, dict):
            meta = meta.model_dump(by_alias=True) if hasattr(meta, "model_dump") else dict(meta)
        line = {
            "event": "call",
            "tool": "create_invoice",
            "execution_id": meta.get("io.postern/execution-id"),
            "arguments": {"customer": customer, "amount": amount},
        }
        with open(journal, "a") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return {"invoice": f"py-{customer}-{amount}"}

    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
