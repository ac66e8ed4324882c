"""The Python MCP SDK's OAuth client for a person (issue 50): from the first 401, through the
protected resource metadata (RFC 9728) and the authorization server's metadata, to dynamic
client registration (RFC 7591), the authorization code with PKCE for the resource (RFC 8707)
and a completed call. The person is already signed in at the provider (oidc_provider.mjs with an
`account`), so the "browser" is an HTTP client with cookies that follows the provider's
redirects until the redirect URI, a loopback URL nothing listens on. Prints one JSON line.

python3 python_oauth_code.py MCP_URL
"""

import asyncio
import json
import socket
import sys
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

from oauth_memory import Memory


class Browser:
    """Follows the authorization request's redirects, with cookies, up to the redirect URI."""

    def __init__(self, redirect_uri):
        self.redirect_uri = redirect_uri
        self.result = None

    async def redirect(self, authorization_url):
        url = authorization_url
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30.0) as http:
            for _ in range(20):
                if url.split("?")[0] == self.redirect_uri:
                    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
                    if "error" in query:
                        raise RuntimeError(f"authorization refused: {query}")
                    self.result = AuthorizationCodeResult(
                        code=query["code"], state=query.get("state"), iss=query.get("iss")
                    )
                    return
                response = await http.get(url)
                if response.status_code not in (302, 303):
                    raise RuntimeError(
                        f"the provider stopped at {url}: {response.status_code} {response.text[:300]}"
                    )
                url = str(response.url.join(response.headers["location"]))
        raise RuntimeError("too many redirects")

    async def callback(self):
        return self.result


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def main(url):
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    browser = Browser(redirect_uri)
    storage = Memory()
    auth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="python-code",
            redirect_uris=[redirect_uri],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    async with httpx2.AsyncClient(auth=auth, timeout=30.0) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(
                    "create_invoice", {"customer": "python-code", "amount": 4}
                )
    execution = (result.structured_content or {}).get("execution", {})
    tokens = storage.tokens
    print(json.dumps({
        "state": execution.get("state"),
        "is_error": result.is_error,
        "token_type": tokens.token_type if tokens else None,
        "scope": tokens.scope if tokens else None,
        "refresh_token": bool(tokens and tokens.refresh_token),
        "client_id": storage.client.client_id if storage.client else None,
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
