#!/usr/bin/env python3
"""Long calls and Postern's own refusals (issue 48), by the official Python SDK (pinned in
requirements.txt), on every path at once: server-everything reached directly, through `postern
serve --stdio`, through an HTTP `postern serve`, and through `postern connect` in front of it.

Usage: python3 tests/interop/python_long_calls.py POSTERN CONFIG NODE EVERYTHING URL SECONDS

  POSTERN     the `postern` binary; CONFIG its config, serving server-everything as upstream
              `ev` (expose = "all", prefix "ev_") with the upstream's default timeouts
  NODE        the node binary; EVERYTHING server-everything's dist/index.js (the direct server)
  URL         a running `postern serve` (HTTP) with the same upstream (token in POSTERN_TOKEN):
              the "http" column is the SDK's Streamable HTTP client, the "connect" column is
              `postern connect URL` with its default attempt timeout
  SECONDS     how long the long call runs (the issue's case: 45, past the old 30 s defaults)

Rows:
  "long call"  trigger-long-running-operation for SECONDS in 5 steps, all columns at once:
               what the client got (isError, the progress reports it saw, the text, Postern's
               recorded state)
  "refusal"    trigger-sampling-request from a client that declared no sampling, then the
               identical call from one that did, then from a third session (another run), one
               column at a time (the gateway's link serves one client's questions at a time)

Prints one JSON line: {row: {column: ...}}. Exit 0 when every session ran; the verdicts are
the caller's to check.
"""

import asyncio
import contextlib
import json
import os
import sys

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

PREFIX = "ev_"


async def sampling(context, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="sampled"),
        model="long-calls-model",
        stop_reason="endTurn",
    )


def summary(result, through):
    """What the client got: Postern's summary (its last text block) apart from the answer."""
    texts = [getattr(c, "text", None) for c in result.content]
    out = {"isError": bool(result.is_error)}
    if through:
        execution = (result.meta or {}).get("io.postern/execution") or {}
        out["state"] = execution.get("state")
        out["outcome"] = execution.get("outcome")
        out["execution_id"] = execution.get("execution_id")
        out["postern"] = texts[-1] if texts else None
        texts = texts[:-1] if texts else texts
    out["text"] = " ".join(t for t in texts if t)
    return out


class Column:
    def __init__(self, name, open_session, through):
        self.name = name
        self.open_session = open_session
        self.through = through

    async def long_call(self, seconds):
        reports = []

        async def on_progress(progress, total, message):
            reports.append(progress)

        async with self.open_session(sampling_callback=sampling) as session:
            result = await session.call_tool(
                (PREFIX if self.through else "") + "trigger-long-running-operation",
                {"duration": seconds, "steps": 5},
                progress_callback=on_progress,
            )
            out = summary(result, self.through)
            out["progress"] = len(reports)
            return out

    async def refusal(self, prompt):
        tool = (PREFIX if self.through else "") + "trigger-sampling-request"
        args = {"prompt": prompt, "maxTokens": 20}
        out = {}
        async with self.open_session(sampling_callback=None) as session:
            try:
                out["without sampling"] = summary(await session.call_tool(tool, args), self.through)
            except Exception as e:  # noqa: BLE001 - what the client saw is the row
                out["without sampling"] = {"raised": f"{type(e).__name__}: {e}"}
        async with self.open_session(sampling_callback=sampling) as session:
            out["with sampling"] = summary(await session.call_tool(tool, args), self.through)
        # A third session (another run) repeats it: through Postern the record's answer, which
        # holds what the second session's client gave, is not shown to it.
        async with self.open_session(sampling_callback=sampling) as session:
            out["another run"] = summary(await session.call_tool(tool, args), self.through)
            if self.through:
                status = await session.call_tool("execution_status", {"execution_id": out["with sampling"]["execution_id"]})
                out["another run's execution_status"] = [getattr(c, "text", None) for c in status.content]
        return out


class _session:
    """A session over the transport `open_transport()` opens, initialised."""

    def __init__(self, open_transport, sampling_callback):
        self.open_transport = open_transport
        self.sampling_callback = sampling_callback

    async def __aenter__(self):
        self.stack = contextlib.AsyncExitStack()
        read, write = await self.stack.enter_async_context(self.open_transport())
        self.session = await self.stack.enter_async_context(
            ClientSession(read, write, read_timeout_seconds=600, sampling_callback=self.sampling_callback)
        )
        await self.session.initialize()
        return self.session

    async def __aexit__(self, *exc):
        return await self.stack.__aexit__(*exc)


def stdio_column(name, params, through):
    return Column(name, lambda sampling_callback: _session(lambda: stdio_client(params), sampling_callback), through)


def http_column(name, url, token):
    @contextlib.asynccontextmanager
    async def open_transport():
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=600.0)) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                yield read, write

    return Column(name, lambda sampling_callback: _session(open_transport, sampling_callback), True)


async def run(postern, config, node, server, url, seconds):
    env = {"PATH": os.environ.get("PATH", "")}
    token = os.environ["POSTERN_TOKEN"]
    columns = [
        stdio_column("direct", StdioServerParameters(command=node, args=[server, "stdio"], env=env), False),
        stdio_column(
            "stdio",
            StdioServerParameters(command=postern, args=["serve", "--stdio", "-c", config], env=env),
            True,
        ),
        http_column("http", url, token),
        stdio_column(
            "connect",
            StdioServerParameters(command=postern, args=["connect", url], env={"POSTERN_TOKEN": token, **env}),
            True,
        ),
    ]
    rows = {"long call": {}, "refusal": {}}

    async def long_call(i, column):
        # http and connect share one gateway: their calls differ, or the second would join the
        # first's execution (the same intent inside the match window).
        try:
            rows["long call"][column.name] = await column.long_call(seconds + i)
        except Exception as e:  # noqa: BLE001 - what the client saw is the row
            rows["long call"][column.name] = {"raised": f"{type(e).__name__}: {e}"}

    async with anyio.create_task_group() as tg:
        for i, column in enumerate(columns):
            tg.start_soon(long_call, i, column)
    for column in columns:
        try:
            rows["refusal"][column.name] = await column.refusal(f"hello from {column.name}")
        except Exception as e:  # noqa: BLE001
            rows["refusal"][column.name] = {"raised": f"{type(e).__name__}: {e}"}
    print(json.dumps(rows))


def main():
    postern, config, node, server, url, seconds = sys.argv[1:7]
    asyncio.run(run(postern, config, node, server, url, int(seconds)))


if __name__ == "__main__":
    main()
