"""The Python MCP SDK's OAuth client against `postern serve` (issue 50): from the first 401,
through the protected resource metadata (RFC 9728) and the authorization server's metadata, to
a client-credentials token for the resource (RFC 8707) and a completed call. Prints one JSON line.

python3 python_oauth.py MCP_URL CLIENT_ID CLIENT_SECRET ISSUER
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client

from oauth_memory import Memory


async def main(url, client_id, secret, issuer):
    storage = Memory()
    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=storage,
        client_id=client_id,
        client_secret=secret,
        scope="mcp",
        issuer=issuer,
    )
    async with httpx2.AsyncClient(auth=auth, timeout=30.0) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(
                    "create_invoice", {"customer": "python-oauth", "amount": 3}
                )
    execution = (result.structured_content or {}).get("execution", {})
    print(json.dumps({
        "state": execution.get("state"),
        "is_error": result.is_error,
        "token_type": storage.tokens.token_type if storage.tokens else None,
    }))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
