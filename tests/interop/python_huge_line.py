#!/usr/bin/env python3
"""A stdio MCP server on the official Python SDK whose one tool, `huge`, answers with a text of
N bytes (argument `size`): one JSON-RPC line longer than a client may take. What the Rust test
puts behind `postern serve` to show an over-long line ends the call at once, with why.

Usage: python3 tests/interop/python_huge_line.py
"""

from mcp.server.mcpserver import MCPServer


def main():
    server = MCPServer("python-huge", version="1.0")

    @server.tool(description="Answers with `size` bytes of text")
    def huge(size: int) -> str:
        return "x" * size

    @server.tool(description="Answers with a short text")
    def small() -> str:
        return "small"

    server.run("stdio")


if __name__ == "__main__":
    main()
