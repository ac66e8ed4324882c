"""A misbehaving MCP server over stdio, written against the wire (no SDK): it negotiates and
lists two tools honestly, then misbehaves. `echo_schema` has an input schema that is not an
object schema (a gateway must refuse to call it). `garbage` answers a call with a line that is
not JSON-RPC and then never answers (a gateway must not take that for an answer). Every call it
receives is appended to the journal file named by argv[1], so a test can say what was sent."""

import json
import sys

journal = sys.argv[1]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    request = json.loads(line)
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bad-upstream", "version": "0"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
            {"name": "echo_schema", "description": "a tool with a string schema",
             "inputSchema": {"type": "string"}},
            {"name": "garbage", "description": "answers garbage",
             "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}]}})
    elif method == "tools/call":
        with open(journal, "a") as f:
            f.write(json.dumps(request["params"]) + "\n")
        sys.stdout.write("this is not JSON-RPC {\n")
        sys.stdout.flush()
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
