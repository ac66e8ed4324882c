#!/usr/bin/env python3
"""A careless agent on the official Python SDK (pinned in requirements.txt) meets the session
cap: run against a `postern serve` whose `max_sessions_per_actor` is 1.

Usage: python3 tests/interop/python_evicted.py URL TOKEN

Session A opens (the SDK also opens its standalone GET stream) and calls `create_invoice`.
While A is still connected, a second client opens session B: A is the actor's least recently
used idle session and gives way. A's next call fails as the SDK reports an unknown session
("Session terminated"); the agent then initialises again, as a host does, repeats the same
call and gets the same execution back (recovered, not sent again). Prints one JSON line with
what it saw; exit 0 when every check holds, 1 otherwise (the reason on stderr).
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client

ARGS = {"customer": "careless-python", "amount": 3}


def execution(result):
    sc = result.structured_content or {}
    return sc.get("execution") or {}


async def session(url, http):
    """An opened ClientSession inside its transport (entered by the caller's exit stack)."""
    transport = streamable_http_client(url, http_client=http)
    read, write = await transport.__aenter__()
    s = ClientSession(read, write)
    await s.__aenter__()
    await s.initialize()
    return transport, s


async def run(url, token):
    headers = {"Authorization": f"Bearer {token}"}
    seen = {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http:
        transport_a, a = await session(url, http)
        first = await a.call_tool("create_invoice", ARGS)
        seen["first"] = execution(first)
        transport_b, b = await session(url, http)
        seen["b_listed"] = len((await b.list_tools()).tools)
        try:
            await a.call_tool("create_invoice", ARGS)
            seen["evicted_error"] = None
        except MCPError as e:
            seen["evicted_error"] = str(e)
        # The host's answer to an unknown session: initialise again and carry on.
        transport_c, c = await session(url, http)
        again = await c.call_tool("create_invoice", ARGS)
        seen["again"] = execution(again)
        for s, t in ((c, transport_c), (b, transport_b), (a, transport_a)):
            try:
                await s.__aexit__(None, None, None)
                await t.__aexit__(None, None, None)
            except Exception:  # an evicted session's transport may end with an error
                pass
    print(json.dumps(seen))
    problems = []
    if seen["first"].get("state") != "completed":
        problems.append(f"first call: {seen['first']}")
    if not seen["evicted_error"] or "terminated" not in seen["evicted_error"].lower():
        problems.append(f"the evicted session's call: {seen['evicted_error']!r}")
    if seen["again"].get("execution_id") != seen["first"].get("execution_id"):
        problems.append(f"after re-initialising: {seen['again']} is not {seen['first']}")
    if seen["again"].get("attempt") != "recovered":
        problems.append(f"after re-initialising, attempt {seen['again'].get('attempt')!r}")
    return problems


def main():
    url, token = sys.argv[1], sys.argv[2]
    problems = asyncio.run(run(url, token))
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
