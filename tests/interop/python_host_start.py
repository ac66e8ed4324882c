#!/usr/bin/env python3
"""A desktop host's start, on the official Python SDK (pinned in requirements.txt): it starts
`postern serve --stdio` as its MCP server and lists the tools exactly once (every page), right
after `initialize`, as hosts do.

Usage: python3 tests/interop/python_host_start.py POSTERN CONFIG

Prints one JSON line: {"tools": [names], "unavailable": [names listed as unavailable]}. Exit 0
when the list was read, 1 with the reason on stderr otherwise; what it must hold is the caller's
check.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client


async def run(postern, config):
    params = StdioServerParameters(
        command=postern,
        args=["serve", "--stdio", "-c", config],
        env={"PATH": os.environ.get("PATH", "")},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools, cursor = [], None
            while True:  # one listing, all of its pages
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                listed = await session.list_tools(params=params)
                tools.extend(listed.tools)
                cursor = listed.next_cursor
                if not cursor:
                    break
    names = [t.name for t in tools]
    unavailable = [t.name for t in tools if (t.meta or {}).get("io.postern/unavailable") is not None]
    print(json.dumps({"tools": names, "unavailable": unavailable}))


def main():
    try:
        asyncio.run(run(sys.argv[1], sys.argv[2]))
    except Exception as e:  # the reason, for the caller's assertion message
        print(f"python_host_start.py: {e!r}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
