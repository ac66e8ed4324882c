#!/usr/bin/env python3
"""A foreign MCP client on stdio: the official Python SDK (PyPI `mcp`, pinned in
requirements.txt) starts `postern connect URL` as its server, as a desktop agent would, and
calls one tool N times, each time as a new agent request.

Usage: python3 tests/interop/python_stdio.py [--calls N] [--idempotency-key KEY]
           POSTERN URL TOOL ARGUMENTS_JSON [-- CONNECT_ARGS...]

  POSTERN         the `postern` binary
  URL             the remote gateway's MCP endpoint, given to `postern connect`
  TOOL            the tool to call
  ARGUMENTS_JSON  its arguments, a JSON object
  CONNECT_ARGS    more arguments for `postern connect` (e.g. --attempt-timeout 2s)
  --calls N       how many separate requests (default 1), one after the other
  --idempotency-key KEY
                  the agent's operation key, sent in `_meta["io.postern/idempotency-key"]`

The bearer token is read by `postern connect` from POSTERN_TOKEN, passed on from this script's
environment (the SDK starts servers with only a few safe variables otherwise); it is never put
on a command line.

Prints one JSON line per call: {"call", "isError", "structuredContent", "texts"}. The checks
on what the answers say belong to the caller. Exit 0 when every call got a result; 1 with the
reason on stderr on any protocol problem (a JSON-RPC error, a closed pipe, an unexpected server).
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, MCPError, types
from mcp.client.stdio import StdioServerParameters, stdio_client

# Longer than any recovery time the tests give `postern connect`: the bridge answers first.
READ_TIMEOUT = 120.0


class CheckFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


async def run(opts):
    env = {}
    if "POSTERN_TOKEN" in os.environ:
        env["POSTERN_TOKEN"] = os.environ["POSTERN_TOKEN"]
    server = StdioServerParameters(
        command=opts["postern"],
        args=["connect", opts["url"], *opts["connect_args"]],
        env=env,
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=READ_TIMEOUT) as session:
            init = await session.initialize()
            check(
                init.server_info.name == "postern-connect",
                f"initialize: server {init.server_info.name!r}, want 'postern-connect'",
            )
            listed = await session.list_tools()
            names = [t.name for t in listed.tools]
            check(opts["tool"] in names, f"tools/list: {opts['tool']!r} missing from {names}")
            meta = None
            if opts["key"] is not None:
                meta = {"io.postern/idempotency-key": opts["key"]}
            for n in range(1, opts["calls"] + 1):
                # A fresh dict each time: every call is its own agent request.
                result = await session.call_tool(opts["tool"], dict(opts["arguments"]), meta=meta)
                check(
                    isinstance(result, types.CallToolResult),
                    f"call {n}: not a CallToolResult: {result!r}",
                )
                texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
                line = {
                    "call": n,
                    "isError": bool(result.is_error),
                    "structuredContent": result.structured_content,
                    "texts": texts,
                }
                print(json.dumps(line), flush=True)


def describe(exc):
    """One line per leaf exception (anyio task groups wrap failures in ExceptionGroups)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    if isinstance(exc, CheckFailed):
        return str(exc)
    if isinstance(exc, MCPError):
        data = f" ({exc.error.data!r})" if exc.error.data is not None else ""
        return f"MCP error {exc.code}: {exc.message}{data}"
    return f"{type(exc).__name__}: {exc}"


USAGE = (
    "usage: python3 tests/interop/python_stdio.py [--calls N] [--idempotency-key KEY] "
    "POSTERN URL TOOL ARGUMENTS_JSON [-- CONNECT_ARGS...]"
)


def parse(argv):
    args = argv[1:]
    connect_args = []
    if "--" in args:
        i = args.index("--")
        args, connect_args = args[:i], args[i + 1 :]
    opts = {"calls": 1, "key": None, "connect_args": connect_args}
    positional = []
    while args:
        a = args.pop(0)
        if a == "--calls" and args:
            opts["calls"] = int(args.pop(0))
        elif a == "--idempotency-key" and args:
            opts["key"] = args.pop(0)
        elif a.startswith("--"):
            raise ValueError(f"unknown option {a}")
        else:
            positional.append(a)
    if len(positional) != 4 or opts["calls"] < 1:
        raise ValueError("wrong arguments")
    opts["postern"], opts["url"], opts["tool"], arguments = positional
    opts["arguments"] = json.loads(arguments)
    if not isinstance(opts["arguments"], dict):
        raise ValueError("ARGUMENTS_JSON is not a JSON object")
    return opts


def main(argv):
    try:
        opts = parse(argv)
    except ValueError as e:
        print(f"{e}\n{USAGE}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run(opts))
    except (Exception, BaseExceptionGroup) as e:
        print(f"FAIL: {describe(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
