#!/usr/bin/env python3
"""A foreign MCP client against `postern serve`: the official Python SDK (PyPI `mcp`, pinned in
requirements.txt) over Streamable HTTP with a bearer token.

Usage: python3 tests/interop/python_sdk.py [--mode legacy|2026-07-28] URL TOKEN

The mode chooses how the SDK connects (SDK 2.3.0 speaks both eras):
  legacy      (default) the `initialize` handshake, then requests in the session it opens
              (protocol 2025-11-25, `Mcp-Session-Id`);
  2026-07-28  `server/discover`, then stateless requests that each carry their own protocol
              version and client capabilities in `_meta` (no handshake, no session). The
              server must answer `server/discover`: there is no fallback to the handshake.

Lists the tools, calls `create_invoice`, calls it again with the same arguments (the same
execution, recovered), and reads the record back through `execution_status`; every answer is
read from `structuredContent.execution`. Exit 0 when every check holds, 1 otherwise (with the
reason on stderr).

The first call must be a new execution: run it against a fresh ledger (as the Rust test
`crates/postern/tests/postern/interop.rs` does), or after the tool's match window has passed.
"""

import asyncio
import os
import sys

# The SDK's 2.x Streamable HTTP client takes a caller-built httpx2 client for headers.
import httpx2
from mcp import ClientSession, MCPError, types
from mcp.client.streamable_http import streamable_http_client

ARGS = {"customer": "python-sdk", "amount": 7}


class CheckFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


def execution_of(result, call):
    check(not result.is_error, f"{call}: isError is true: {result.content!r}")
    sc = result.structured_content
    check(isinstance(sc, dict), f"{call}: structuredContent is not an object: {sc!r}")
    ex = sc.get("execution")
    check(isinstance(ex, dict), f"{call}: structuredContent.execution missing: {sc!r}")
    return sc, ex


MODES = ("legacy", "2026-07-28")


async def connect(session, mode):
    """Opens the conversation in `mode`; returns (server name, server version, protocol)."""
    if mode == "legacy":
        init = await session.initialize()
        return init.server_info.name, init.server_info.version, init.protocol_version
    found = await session.discover()
    check(
        mode in found.supported_versions,
        f"server/discover: supportedVersions {found.supported_versions!r} lacks {mode!r}",
    )
    check(
        session.protocol_version == mode,
        f"server/discover: negotiated {session.protocol_version!r}, want {mode!r}",
    )
    check(session.initialize_result is None, "server/discover: an initialize result exists")
    info = session.server_info
    return (info.name if info else None), (info.version if info else None), session.protocol_version


async def run(url, token, mode):
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                name, version, protocol = await connect(session, mode)
                print(f"connected ({mode}): server {name} {version}, protocol {protocol}")

                names = []
                cursor = None
                while True:
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    listed = await session.list_tools(params=params)
                    names.extend(t.name for t in listed.tools)
                    cursor = listed.next_cursor
                    if not cursor:
                        break
                print("tools:", ", ".join(names))
                for want in ("create_invoice", "execution_status"):
                    check(want in names, f"tools/list: {want!r} missing from {names}")

                first = await session.call_tool("create_invoice", ARGS)
                _, ex = execution_of(first, "create_invoice (first)")
                exe = ex.get("execution_id")
                check(
                    isinstance(exe, str) and exe.startswith("exe_"),
                    f"create_invoice (first): execution_id {exe!r} does not start with exe_",
                )
                check(
                    ex.get("state") == "completed",
                    f"create_invoice (first): state {ex.get('state')!r}, want 'completed'",
                )
                check(
                    ex.get("attempt") == "new",
                    f"create_invoice (first): attempt {ex.get('attempt')!r}, want 'new'",
                )
                print(f"create_invoice: {exe} {ex['state']} (attempt {ex['attempt']})")

                again = await session.call_tool("create_invoice", dict(ARGS))
                _, ex2 = execution_of(again, "create_invoice (again)")
                check(
                    ex2.get("execution_id") == exe,
                    f"create_invoice (again): execution_id {ex2.get('execution_id')!r}, want {exe!r}",
                )
                check(
                    ex2.get("attempt") == "recovered",
                    f"create_invoice (again): attempt {ex2.get('attempt')!r}, want 'recovered'",
                )
                print(f"create_invoice again: {exe} (attempt {ex2['attempt']})")

                status = await session.call_tool("execution_status", {"execution_id": exe})
                sc, ex3 = execution_of(status, "execution_status")
                check(
                    ex3.get("execution_id") == exe,
                    f"execution_status: execution_id {ex3.get('execution_id')!r}, want {exe!r}",
                )
                record = (sc.get("response") or {}).get("record")
                check(isinstance(record, dict), f"execution_status: no record in {sc!r}")
                check(
                    record.get("arguments", {}).get("customer") == ARGS["customer"],
                    f"execution_status: record arguments {record.get('arguments')!r}",
                )
                events = [e.get("event") for e in (sc.get("response") or {}).get("events") or []]
                print(f"execution_status: {exe} {ex3.get('state')}, events {events}")

                # A tool that waits for an operator's approval, called by a client that declared
                # no URL elicitation: the pending result, as for any client (issue 18).
                approval_tool = os.environ.get("POSTERN_SDK_APPROVAL_TOOL")
                if approval_tool:
                    pending = await session.call_tool(approval_tool, {"customer": "sdk-approval", "amount": 3})
                    _, exa = execution_of(pending, approval_tool)
                    check(
                        exa.get("state") == "awaiting_approval",
                        f"{approval_tool}: state {exa.get('state')!r}, want 'awaiting_approval'",
                    )
                    print(f"approval pending: {exa.get('execution_id')}")

    print(
        f"ok: python mcp SDK ({mode}, protocol {protocol}) listed {len(names)} tools, "
        f"created {exe}, recovered it on retry, read its record"
    )


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


USAGE = "usage: python3 tests/interop/python_sdk.py [--mode legacy|2026-07-28] URL TOKEN"


def main(argv):
    args = argv[1:]
    mode = "legacy"
    if len(args) >= 2 and args[0] == "--mode":
        mode = args[1]
        args = args[2:]
    if len(args) != 2 or mode not in MODES:
        print(USAGE, file=sys.stderr)
        return 1
    try:
        asyncio.run(run(args[0], args[1], mode))
    except (Exception, BaseExceptionGroup) as e:
        print(f"FAIL: {describe(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
