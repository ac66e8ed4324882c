"""The OAuth scripts' token storage: tokens and client information kept in memory (the Python
MCP SDK's TokenStorage protocol), shared by python_oauth.py and python_oauth_code.py."""


class Memory:
    """Tokens and client information kept in memory (the SDK's TokenStorage)."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info
