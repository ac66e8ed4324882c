#!/usr/bin/env python3
"""Every result shape Postern gives, read by the official Python SDK (pinned in requirements.txt),
which validates a successful result's `structuredContent` against the tool's `outputSchema`
and raises when it does not match (issue 48 points 3 and 8). In front of the npm reference
servers: server-memory (upstream `memory`), server-filesystem (`fs`) and server-everything
(`ev`), as `crates/postern/tests/postern/result_shapes.rs` configures them.

Usage: python3 tests/interop/python_shapes.py COLUMN MARKER TARGET [OPS_URL OPS_TOKEN]
       python3 tests/interop/python_shapes.py --large ERA URL FILE

  COLUMN   legacy | 2026-07-28: Streamable HTTP at TARGET (a `postern serve` URL, token in
           POSTERN_TOKEN) in that protocol era; stdio: TARGET is a config file served by
           `postern serve --stdio -c TARGET` (the binary in POSTERN_BIN)
  MARKER   the argument that tells this gateway's server-memory process from any other's (it
           is stopped, SIGSTOP, to leave a call's outcome unknown)
  OPS_URL  the gateway's /ops, with an operator's token: a pending approval is denied there
           (without them the denied row is not run)

Rows: an applied answer (each server's tool with an outputSchema), a replay of a stored answer,
an answer over max_response_bytes, a pending approval, a denied call, an unknown outcome,
invalid arguments (an isError result) and an unknown tool (a JSON-RPC error). Prints one JSON
line {row: what was seen}; exit 0 when every check holds, 1 with the reason on stderr.

With --large, FILE (in server-filesystem's directory) is read with `fs_read_text_file` over HTTP
in protocol era ERA (legacy | 2026-07-28; issue 48 point 7: the answer is twice the file, over
the SDK's 1 MiB SSE event limit if it came as one event); prints {"bytes": n, "same": bool}.
"""

import asyncio
import json
import os
import signal
import sys
import uuid

import anyio
import httpx2
from mcp import ClientSession, MCPError
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

EXECUTION = "io.postern/execution"


class CheckFailed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise CheckFailed(what)


def text_of(result):
    return "\n".join(getattr(c, "text", "") for c in result.content)


def record(result, row):
    ex = (result.meta or {}).get(EXECUTION)
    check(isinstance(ex, dict), f"{row}: no execution record in _meta: {result.meta!r}")
    return ex


def applied(result, row):
    """A successful result: the SDK validated its structuredContent against the schema."""
    check(not result.is_error, f"{row}: isError: {text_of(result)[:400]}")
    check(result.structured_content is not None, f"{row}: no structuredContent")
    check(
        "execution" not in result.structured_content,
        f"{row}: Postern's block in the upstream's structuredContent: {result.structured_content!r}",
    )
    return {"isError": False, "attempt": record(result, row)["attempt"], "state": record(result, row)["state"]}


def refused(result, row, says):
    """A non-applied outcome: an error result with the guidance and no structuredContent."""
    text = text_of(result)
    check(result.is_error, f"{row}: not an error result: {text[:400]}")
    check(result.structured_content is None, f"{row}: structuredContent {result.structured_content!r}")
    check(says in text, f"{row}: {says!r} not in {text[:600]!r}")
    return {"isError": True, "state": record(result, row)["state"], "text": text[-300:]}


def memory_pids(marker):
    """server-memory processes of this gateway (their command line carries the marker)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in args and any(b"server-memory" in a for a in args):
            pids.append(int(pid))
    return pids


async def until_answered(session, tool, arguments):
    """The upstream may be (re)starting: the first call that is answered."""
    for _ in range(60):
        result = await session.call_tool(tool, arguments)
        if not result.is_error:
            return result
        await anyio.sleep(0.5)
    raise CheckFailed(f"{tool}: never answered: {text_of(result)[:400]}")


async def deny(ops_url, ops_token, execution_id):
    headers = {"Authorization": f"Bearer {ops_token}", "content-type": "application/json"}
    async with httpx2.AsyncClient(headers=headers, timeout=30.0) as http:
        r = await http.post(f"{ops_url}/ops/approvals/{execution_id}/deny", content=b'{"reason":"shapes"}')
        check(r.status_code < 300, f"deny {execution_id}: {r.status_code} {r.text}")


async def rows(session, column, marker, ops):
    out = {}
    tag = f"{column}-{uuid.uuid4().hex[:8]}"
    await session.list_tools()  # the SDK validates against the schemas it listed

    # Applied answers of tools with an outputSchema, one per server.
    entities = {"entities": [{"name": f"shapes-{tag}", "entityType": "test", "observations": ["x" * 1500]}]}
    out["applied (memory_create_entities)"] = applied(
        await until_answered(session, "memory_create_entities", entities), "memory_create_entities"
    )
    out["applied (memory_read_graph)"] = applied(await session.call_tool("memory_read_graph", {}), "memory_read_graph")
    out["applied (fs_list_allowed_directories)"] = applied(
        await session.call_tool("fs_list_allowed_directories", {}), "fs_list_allowed_directories"
    )
    out["applied (ev_get-structured-content)"] = applied(
        await session.call_tool("ev_get-structured-content", {"location": "New York"}), "ev_get-structured-content"
    )
    # The identical call again: answered from the stored record.
    replay = applied(await session.call_tool("memory_create_entities", entities), "replay")
    check(replay["attempt"] == "recovered", f"replay: attempt {replay['attempt']!r}")
    out["replay of a stored answer"] = replay

    # More than the tool's 1024-byte max_response_bytes: not kept, the caller gets a note.
    out["over max_response_bytes"] = refused(
        await session.call_tool("open_capped", {"names": [f"shapes-{tag}"]}),
        "over max_response_bytes",
        "max_response_bytes",
    )

    # Waiting for an operator, then denied.
    query = {"query": f"shapes-{tag}"}
    pending = await session.call_tool("search_approved", query)
    out["pending approval"] = refused(pending, "pending approval", "awaiting an operator's approval")
    if ops:
        await deny(*ops, record(pending, "pending approval")["execution_id"])
        out["denied"] = refused(await session.call_tool("search_approved", query), "denied", "denied")

    # Invalid arguments: an error result saying what is wrong, nothing sent.
    invalid = await session.call_tool("memory_create_entities", {"entities": "not a list"})
    text = text_of(invalid)
    check(invalid.is_error, f"invalid arguments: not an error result: {text}")
    check("invalid arguments" in text and "entities" in text, f"invalid arguments: {text}")
    check(
        (invalid.meta or {}).get("io.postern/refused", {}).get("reason") == "invalid_arguments",
        f"invalid arguments: _meta {invalid.meta!r}",
    )
    out["invalid arguments"] = {"isError": True, "text": text}
    # An unknown tool stays a protocol error.
    try:
        await session.call_tool("no_such_tool", {})
        raise CheckFailed("unknown tool: answered with a result")
    except MCPError as e:
        out["unknown tool"] = {"error": e.error.code}

    # The server stopped mid-call: no answer within the upstream's timeout, outcome unknown.
    pids = memory_pids(marker)
    check(pids, f"no server-memory process with marker {marker}")
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        unknown = await session.call_tool("memory_read_graph", {})
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    out["unknown outcome"] = refused(unknown, "unknown outcome", "outcome unknown")
    return out


async def run_http(url, column, marker, ops):
    return await connected(url, column, lambda session: rows(session, column, marker, ops))


async def connected(url, era, then):
    """`then(session)` over Streamable HTTP at `url` in protocol era `era`."""
    headers = {"Authorization": f"Bearer {os.environ['POSTERN_TOKEN']}"}
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write, read_timeout_seconds=120) as session:
                if era == "legacy":
                    await session.initialize()
                else:
                    await session.discover()
                    check(session.protocol_version == era, f"negotiated {session.protocol_version!r}")
                return await then(session)


async def large(session, path):
    with open(path) as f:
        want = f.read()
    await session.list_tools()
    result = await session.call_tool("fs_read_text_file", {"path": path})
    check(not result.is_error, f"read: isError: {text_of(result)[:400]}")
    got = result.structured_content["content"]
    return {"bytes": len(got.encode()), "same": got == want and result.content[0].text == want}


async def run_stdio(config, marker):
    params = StdioServerParameters(
        command=os.environ["POSTERN_BIN"],
        args=["serve", "--stdio", "-c", config],
        env={"PATH": os.environ.get("PATH", "")},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=120) as session:
            await session.initialize()
            return await rows(session, "stdio", marker, None)


def main():
    column, marker, target, *ops = sys.argv[1:]
    try:
        if column == "--large":
            out = asyncio.run(connected(target, marker, lambda session: large(session, ops[0])))
        elif column == "stdio":
            out = asyncio.run(run_stdio(target, marker))
        else:
            out = asyncio.run(run_http(target, column, marker, tuple(ops) if ops else None))
    except BaseException as e:  # the reason, for the caller's assertion message
        while isinstance(e, BaseExceptionGroup) and e.exceptions:
            e = e.exceptions[0]
        print(f"python_shapes.py {column}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
