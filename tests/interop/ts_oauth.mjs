// The TypeScript MCP SDK's OAuth client against `postern serve` (issue 50), through
// StreamableHTTPClientTransport's authProvider: from the first 401, through the protected
// resource metadata (RFC 9728) and the authorization server's metadata, to a token for the
// resource (RFC 8707) and a completed call. Prints one JSON line.
//   code                an in-memory OAuthClientProvider: dynamic client registration (RFC 7591)
//                       and the authorization code with PKCE. The person is already signed in at
//                       the provider (oidc_provider.mjs with an `account`): the "browser" follows
//                       the provider's redirects with its own cookie jar up to the redirect URI
//                       (a loopback URL nothing listens on), then finishAuth(code) and reconnect.
//   client_credentials  the SDK's ClientCredentialsProvider (auth-extensions), with ISSUER as
//                       its expected issuer when given.
//
// node ts_oauth.mjs SDK_DIR MCP_URL code
// node ts_oauth.mjs SDK_DIR MCP_URL client_credentials CLIENT_ID CLIENT_SECRET [ISSUER]
// (SDK_DIR: the installed @modelcontextprotocol/sdk package.)
import { createServer } from 'node:net';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [sdk, url, mode, clientId, clientSecret, issuer] = process.argv.slice(2);
const load = (path) => import(pathToFileURL(join(sdk, 'dist/esm', path)));
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { UnauthorizedError } = await load('client/auth.js');
const { ClientCredentialsProvider } = await load('client/auth-extensions.js');

/** A cookie jar that honours each cookie's path (enough for one provider on one origin). */
class Jar {
  #cookies = new Map();

  store(response) {
    for (const line of response.headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';').map((s) => s.trim());
      const at = pair.indexOf('=');
      const name = pair.slice(0, at);
      const value = pair.slice(at + 1);
      const attribute = (key) => attributes.find((a) => a.toLowerCase().startsWith(`${key}=`))?.split('=')[1];
      const path = attribute('path') ?? '/';
      const expires = attribute('expires');
      const gone = value === '' || (expires && Date.parse(expires) <= Date.now()) || attribute('max-age') === '0';
      if (gone) this.#cookies.delete(`${name};${path}`);
      else this.#cookies.set(`${name};${path}`, { name, value, path });
    }
  }

  header(target) {
    const { pathname } = new URL(target);
    return [...this.#cookies.values()]
      .filter((c) => pathname === c.path || pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`))
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
  }
}

/** OAuthClientProvider kept in memory, for a person already signed in at the provider. */
class SignedInPerson {
  constructor(redirectUrl) {
    this.redirectUrl = redirectUrl;
    this.clientMetadata = {
      client_name: 'ts-oauth',
      redirect_uris: [redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      scope: 'mcp',
    };
    this.expectedState = randomBytes(16).toString('base64url');
  }

  state() { return this.expectedState; }
  clientInformation() { return this.client; }
  saveClientInformation(client) { this.client = client; }
  tokens() { return this.savedTokens; }
  saveTokens(tokens) { this.savedTokens = tokens; }
  saveCodeVerifier(verifier) { this.verifier = verifier; }
  codeVerifier() { return this.verifier; }

  /** The browser: follows the provider's redirects until the redirect URI and keeps the code. */
  async redirectToAuthorization(authorizationUrl) {
    const jar = new Jar();
    let next = authorizationUrl.href;
    for (let hop = 0; hop < 20; hop += 1) {
      if (next.split('?')[0] === this.redirectUrl) {
        const query = new URL(next).searchParams;
        if (query.has('error')) throw new Error(`authorization refused: ${query}`);
        if (query.get('state') !== this.expectedState) throw new Error('state mismatch');
        const expectedIssuer = new URL(authorizationUrl).origin;
        if (query.has('iss') && query.get('iss') !== expectedIssuer) throw new Error(`iss ${query.get('iss')}`);
        this.code = query.get('code');
        return;
      }
      const response = await fetch(next, { redirect: 'manual', headers: { cookie: jar.header(next) } });
      jar.store(response);
      if (![302, 303].includes(response.status)) {
        throw new Error(`the provider stopped at ${next}: ${response.status} ${(await response.text()).slice(0, 300)}`);
      }
      next = new URL(response.headers.get('location'), next).href;
    }
    throw new Error('too many redirects');
  }
}

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => { server.listen(0, '127.0.0.1', resolve); });
  const { port } = server.address();
  await new Promise((resolve) => { server.close(resolve); });
  return port;
}

async function connect(authProvider) {
  const client = new Client({ name: 'ts-oauth', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
  await client.connect(transport);
  return { client, transport };
}

let authProvider;
let connected;
if (mode === 'code') {
  authProvider = new SignedInPerson(`http://127.0.0.1:${await freePort()}/callback`);
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
  try {
    await new Client({ name: 'ts-oauth', version: '1.0.0' }).connect(transport);
    throw new Error('connected without authorization');
  } catch (err) {
    if (!(err instanceof UnauthorizedError) || !authProvider.code) throw err;
  }
  await transport.finishAuth(authProvider.code);
  await transport.close();
  connected = await connect(authProvider);
} else if (mode === 'client_credentials') {
  authProvider = new ClientCredentialsProvider({
    clientId, clientSecret, scope: 'mcp', ...(issuer ? { expectedIssuer: issuer } : {}),
  });
  connected = await connect(authProvider);
} else {
  throw new Error(`unknown mode ${mode}: code or client_credentials`);
}

const result = await connected.client.callTool({ name: 'create_invoice', arguments: { customer: 'ts-oauth', amount: 5 } });
await connected.client.close();
const tokens = authProvider.tokens();
process.stdout.write(`${JSON.stringify({
  state: result.structuredContent?.execution?.state ?? null,
  is_error: result.isError ?? false,
  token_type: tokens?.token_type ?? null,
  scope: tokens?.scope ?? null,
  refresh_token: Boolean(tokens?.refresh_token),
  client_id: authProvider.clientInformation()?.client_id ?? null,
})}\n`);
