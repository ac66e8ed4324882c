#!/usr/bin/env python3
"""The capability matrix (issue 32): the same MCP server reached directly and through Postern,
by the official Python SDK (pinned in requirements.txt), one capability at a time. Through
Postern, a result may differ from the direct one only by what Postern adds (its execution
block, the tool-name prefix, the logger's upstream name).

Usage: python3 tests/interop/python_matrix.py POSTERN CONFIG NODE EVERYTHING [URL]
       python3 tests/interop/python_matrix.py --filesystem POSTERN CONFIG NODE FILESYSTEM DIR [URL]

  POSTERN     the `postern` binary; CONFIG its config, serving server-everything as upstream
              `ev` (expose = "all", prefix "ev_"): the "stdio" column is `postern serve --stdio`
  NODE        the node binary; EVERYTHING server-everything's dist/index.js (the direct server)
  URL         a running `postern serve` (HTTP) with the same upstream: the "connect" column is
              `postern connect URL` in front of it (token in POSTERN_TOKEN)

With --filesystem the server is server-filesystem, serving DIR (upstream `fs`, prefix "fs_",
`read_only = ["read_*", ...]`), and the rows are its large read-only answer (a 1 MiB file: more
than the gateway's default answer cap, returned whole because the tool is read-only) and its
`isError` answer (a write outside DIR). Its client declares no roots: server-filesystem replaces
its directories with a client's roots.

Prints one JSON line: {capability: {"direct": ..., "stdio": ..., "connect": ..., "same": bool}}
("same": every column equals the direct one). Exit 0 when every session ran; the verdicts are
the caller's to check.

Two rows differ by design and are reported as such, not as equal: `roots` (an upstream that
asks for roots outside a call gets none through Postern: its link serves many clients, and a
client's roots must not re-scope a server the operator configured) and `list_changed` (through
Postern the upstream's first list is complete before the client is served; the client is told
when the list changes later).
"""

import asyncio
import base64
import json
import os
import sys

import anyio
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client

PREFIX = "ev_"
WAIT = 15.0  # the server's simulated logging and subscription updates come every 5 s or so


class Client:
    """One session and everything the server told it outside answers."""

    def __init__(self):
        self.logs = []
        self.notes = []
        self.sampled = 0
        self.elicited = []
        self.roots_asked = 0

    async def sampling(self, context, params):
        self.sampled += 1
        first = params.messages[0].content
        text = getattr(first, "text", "")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=f"sampled: {text[:40]}"),
            model="matrix-model",
            stop_reason="endTurn",
        )

    async def elicitation(self, context, params):
        mode = getattr(params, "mode", None) or "form"
        self.elicited.append(mode)
        if mode == "url":
            return types.ElicitResult(action="accept")
        schema = getattr(params, "requested_schema", None) or {}
        content = {}
        for name, prop in (schema.get("properties") or {}).items():
            kind = prop.get("type")
            if "enum" in prop:
                content[name] = prop["enum"][0]
            elif kind == "boolean":
                content[name] = True
            elif kind in ("number", "integer"):
                content[name] = prop.get("minimum", 1)
            elif kind == "string":
                content[name] = prop.get("default") or ("ada@example.com" if prop.get("format") == "email" else "Ada")
        return types.ElicitResult(action="accept", content=content)

    async def roots(self, context):
        self.roots_asked += 1
        return types.ListRootsResult(roots=[types.Root(uri="file:///tmp/matrix-root", name="matrix")])

    async def logging(self, params):
        self.logs.append({"level": params.level, "logger": params.logger})

    async def messages(self, message):
        if isinstance(message, Exception):
            return
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method:
            params = getattr(root, "params", None)
            self.notes.append({"method": method, "uri": getattr(params, "uri", None)})

    def session(self, read, write, roots=True):
        return ClientSession(
            read,
            write,
            read_timeout_seconds=60,
            sampling_callback=self.sampling,
            elicitation_callback=self.elicitation,
            list_roots_callback=self.roots if roots else None,
            logging_callback=self.logging,
            message_handler=self.messages,
        )


def dump(value):
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def answer(result, through):
    """What the model and client read of a tool result; Postern's added block taken off."""
    content = [dump(c) for c in result.content]
    if through:
        meta = (result.meta or {}).get("io.postern/execution")
        if meta is None or not content:
            return {"error": "no execution block", "content": content}
        content = content[:-1]
    out = {"content": content, "isError": bool(result.is_error)}
    if result.structured_content is not None and (not through or "execution" not in result.structured_content):
        out["structuredContent"] = result.structured_content
    return out


async def all_pages(list_fn, field):
    items, cursor = [], None
    while True:
        page = await list_fn(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            return items


async def wait_for(predicate, seconds=WAIT):
    with anyio.move_on_after(seconds):
        while not predicate():
            await anyio.sleep(0.1)
    return predicate()


async def probe(session, client, through):
    """Every capability, as one client sees it; names through Postern carry the prefix."""
    name = (lambda t: PREFIX + t) if through else (lambda t: t)
    rows = {}

    async def row(key, fn):
        try:
            rows[key] = await fn()
        except Exception as e:  # noqa: BLE001 - the matrix records what failed
            rows[key] = {"error": f"{type(e).__name__}: {e}"}

    async def tools_list():
        # The conditional tools appear after initialisation (list_changed); give them a moment.
        await anyio.sleep(1.0)
        tools = await all_pages(session.list_tools, "tools")
        keep = {}
        for t in tools:
            if through and not t.name.startswith(PREFIX):
                continue
            plain = t.name[len(PREFIX):] if through else t.name
            keep[plain] = {"title": t.title, "outputSchema": t.output_schema, "inputSchema": t.input_schema}
        return keep

    await row("tools list (outputSchema, title)", tools_list)
    await row("text result", lambda: call(session, name("echo"), {"message": "hello"}, through))
    await row("image result", lambda: call(session, name("get-tiny-image"), {}, through))
    await row("resource link", lambda: call(session, name("get-resource-links"), {"count": 2}, through))
    await row("structured content", lambda: call(session, name("get-structured-content"), {"location": "New York"}, through))

    async def resources():
        listed = await all_pages(session.list_resources, "resources")
        uris = sorted(r.uri for r in listed)
        read = await session.read_resource(uris[0])
        return {"uris": uris, "first": dump(read)["contents"]}

    await row("resources list/read", resources)

    async def templates():
        listed = await all_pages(session.list_resource_templates, "resource_templates")
        shapes = sorted(t.uri_template for t in listed)
        target = next((t for t in shapes if "{" in t and t.endswith("}")), None)
        read = None
        if target:
            uri = target[: target.index("{")] + "1"
            read = dump(await session.read_resource(uri))["contents"]
            for c in read:  # the server stamps the time it made the blob: compare what is not time
                if "blob" in c:
                    c["blob"] = base64.b64decode(c["blob"]).decode(errors="replace").split(" created at")[0]
        return {"templates": shapes, "read": read}

    await row("resource templates", templates)

    async def prompts():
        listed = await all_pages(session.list_prompts, "prompts")
        names = sorted(p.name[len(PREFIX):] if through else p.name for p in listed)
        got = await session.get_prompt(name("simple-prompt"))
        return {"names": names, "simple": [dump(m) for m in got.messages]}

    await row("prompts list/get", prompts)

    async def completion():
        done = await session.complete(
            types.PromptReference(type="ref/prompt", name=name("completable-prompt")),
            {"name": "department", "value": "E"},
        )
        return dump(done.completion)

    await row("completion", completion)

    async def subscribe():
        uri = "demo://resource/static/document/architecture.md"
        listed = [r.uri for r in await all_pages(session.list_resources, "resources")]
        uri = next((u for u in listed if "static" in u), listed[0])
        await session.subscribe_resource(uri)
        toggled = await call(session, name("toggle-subscriber-updates"), {}, through)
        got = await wait_for(lambda: any(n["method"] == "notifications/resources/updated" for n in client.notes))
        await call(session, name("toggle-subscriber-updates"), {}, through)
        await session.unsubscribe_resource(uri)
        return {"updated": got, "toggled": bool(toggled)}

    await row("resource subscribe/updates", subscribe)

    async def logging():
        await session.set_logging_level("debug")
        await call(session, name("toggle-simulated-logging"), {}, through)
        got = await wait_for(lambda: len(client.logs) > 0)
        await call(session, name("toggle-simulated-logging"), {}, through)
        loggers = {l["logger"] for l in client.logs}
        upstream_named = all((lg or "").startswith("ev") for lg in loggers) if through else True
        return {"messages": got, "logger named by upstream": upstream_named}

    await row("logging", logging)

    async def list_changed():
        return {"tools list_changed seen": any(n["method"] == "notifications/tools/list_changed" for n in client.notes)}

    await row("list_changed", list_changed)

    async def progress():
        seen = []

        async def on_progress(p, total, message):
            seen.append(p)

        result = await session.call_tool(
            name("trigger-long-running-operation"), {"duration": 1, "steps": 4}, progress_callback=on_progress
        )
        return {"progress": seen, "answer": answer(result, through)["content"]}

    await row("progress", progress)

    async def cancellation():
        with anyio.move_on_after(0.8):
            await session.call_tool(name("trigger-long-running-operation"), {"duration": 4, "steps": 4})
        # The session goes on after a cancelled request.
        after = await call(session, name("echo"), {"message": "after cancel"}, through)
        return {"next call": after["content"]}

    await row("cancellation", cancellation)

    async def form_elicitation():
        before = len(client.elicited)
        result = await call(session, name("trigger-elicitation-request"), {}, through)
        # The server quotes the raw answer last; JSON object keys may come in another order
        # through a proxy that parses them (rmcp keeps objects as maps), so that quote is
        # compared as JSON.
        content = result["content"]
        raw = content[-1]["text"] if content else ""
        at = raw.find("{")
        quoted = json.loads(raw[at:]) if at >= 0 else raw
        return {"asked": client.elicited[before:], "answer": content[:-1], "raw": quoted}

    await row("elicitation (form)", form_elicitation)
    async def url_elicitation():
        before = len(client.elicited)
        result = await call(
            session,
            name("trigger-url-elicitation"),
            {"url": "https://example.com/verify", "message": "verify", "elicitationId": "matrix-1"},
            through,
        )
        return {"asked": client.elicited[before:], "answer": result}

    await row("elicitation (url)", url_elicitation)

    async def sampling():
        before = client.sampled
        result = await call(session, name("trigger-sampling-request"), {"prompt": "hi", "maxTokens": 20}, through)
        return {"asked": client.sampled - before, "answer": result}

    await row("sampling", sampling)

    async def roots():
        result = await call(session, name("get-roots-list"), {}, through)
        return {"answer": result}

    await row("roots", roots)

    async def task_required():
        # `execution.taskSupport: "required"`: the server refuses a call without a task. rmcp
        # 3.11 does not read that field (2026-07-28 moved tasks to an extension), so Postern
        # lists the tool and the server's refusal reaches the agent as an error result.
        return await call(session, name("simulate-research-query"), {"topic": "matrix"}, through)

    await row("task-required tool", task_required)
    return rows


LARGE = "large.txt"
LARGE_BYTES = 1024 * 1024


async def probe_filesystem(session, client, through, directory):
    """server-filesystem's rows: an answer over the default cap, and an error answer."""
    name = (lambda t: "fs_" + t) if through else (lambda t: t)
    rows = {}

    async def large():
        got = await call(session, name("read_text_file"), {"path": os.path.join(directory, LARGE)}, through)
        text = "".join(c.get("text", "") for c in got.get("content", []))
        return {"bytes": len(text.encode()), "answer": got}

    async def error():
        return await call(session, name("write_file"), {"path": "/tmp/postern-matrix-outside.txt", "content": "x"}, through)

    for key, fn in (("large output (1 MiB read-only)", large), ("isError", error)):
        try:
            rows[key] = await fn()
        except Exception as e:  # noqa: BLE001 - the matrix records what failed
            rows[key] = {"error": f"{type(e).__name__}: {e}"}
    return rows


async def call(session, tool, arguments, through):
    result = await session.call_tool(tool, arguments)
    return answer(result, through)


async def run_one(params, through, directory=None):
    client = Client()
    async with stdio_client(params) as (read, write):
        async with client.session(read, write, roots=directory is None) as session:
            await session.initialize()
            if directory is not None:
                return await probe_filesystem(session, client, through, directory)
            return await probe(session, client, through)


def verdicts(results):
    out = {}
    direct = results["direct"]
    for key, d in direct.items():
        row = {name: column.get(key) for name, column in results.items()}
        row["same"] = not (isinstance(d, dict) and "error" in d) and all(
            column.get(key) == d for column in results.values()
        )
        out[key] = row
    return out


async def run(postern, config, node, server, url=None, directory=None):
    env = {"PATH": os.environ.get("PATH", "")}
    direct_args = [server, directory] if directory else [server, "stdio"]
    columns = {
        "direct": (StdioServerParameters(command=node, args=direct_args, env=env), False),
        "stdio": (StdioServerParameters(command=postern, args=["serve", "--stdio", "-c", config], env=env), True),
    }
    if url:
        token = {"POSTERN_TOKEN": os.environ["POSTERN_TOKEN"], **env}
        columns["connect"] = (StdioServerParameters(command=postern, args=["connect", url], env=token), True)
    results = {}

    async def go(key, params, through):
        results[key] = await run_one(params, through, directory)

    async with anyio.create_task_group() as tg:
        for key, (params, through) in columns.items():
            tg.start_soon(go, key, params, through)
    print(json.dumps(verdicts(results)))


def main():
    try:
        if sys.argv[1] == "--filesystem":
            postern, config, node, server, directory, *url = sys.argv[2:8]
            with open(os.path.join(directory, LARGE), "w") as f:
                f.write(("0123456789abcdef" * 4 + "\n") * (LARGE_BYTES // 65 + 1))
            asyncio.run(run(postern, config, node, server, url[0] if url else None, directory))
        else:
            asyncio.run(run(*sys.argv[1:6]))
    except Exception as e:  # the reason, for the caller's assertion message
        print(f"python_matrix.py: {e!r}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
