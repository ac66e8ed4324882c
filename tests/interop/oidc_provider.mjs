// A certified OpenID provider (panva's oidc-provider, pinned in package.json) for the OAuth
// tests (issue 50): issuer http://127.0.0.1:PORT with a P-256 key generated for the run, one
// confidential client allowed the client-credentials grant, and RFC 8707 resource indicators
// that issue access tokens (JWT per RFC 9068, ES256, 300 s) for the configured resources only.
//
// node oidc_provider.mjs OIDC_PROVIDER_DIR PORT RESOURCE CLIENT_ID CLIENT_SECRET [OPTIONS_JSON]
//
// OPTIONS_JSON (every key optional):
//   resources     resource URLs tokens are issued for (default [RESOURCE]); each allows the
//                 scopes "mcp ops", audience = the resource. A request without `resource` gets
//                 resources[0], unless it asks for `openid` (then a userinfo token, as a login).
//   opaque        true (or a list of resources): opaque access tokens, for RFC 7662
//                 introspection, instead of JWTs.
//   account       {"sub", "groups", "email"} (default {"sub": "alice"}): the person already
//                 signed in at this SSO. Login and consent complete with no page: every requested
//                 scope, claim and resource scope is granted. ID tokens and userinfo carry
//                 `groups`/`email` for the scopes `groups`/`email`; access tokens issued for the
//                 person carry `groups`.
//   clients       extra client metadata (oidc-provider's `clients`), e.g. a web client with
//                 redirect_uris, a native client (loopback redirects, any port), a device-flow
//                 client, a resource server allowed to introspect (any confidential client).
//   registration  true: open dynamic client registration (RFC 7591) at /reg.
//   ttl           access tokens' lifetime in seconds (default 300).
// Always on: authorization code with PKCE (required for every client), refresh tokens for any
// client whose grant_types include refresh_token, the device flow (RFC 8628: /device/auth, the
// confirm page's button is #confirm, the last page says "signed in"), introspection
// (/token/introspection), revocation (/token/revocation), RP-initiated logout (/session/end,
// confirmed without a click, post_logout_redirect_uri honoured), userinfo (/me).
// Prints one line containing "listening" on stdout when ready; everything else goes to stderr.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkg, port, resource, clientId, clientSecret, optionsJson] = process.argv.slice(2);
const options = optionsJson ? JSON.parse(optionsJson) : {};
const { default: Provider, errors } = await import(pathToFileURL(join(pkg, 'lib/index.js')));
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const key = { ...privateKey.export({ format: 'jwk' }), kid: 'oidc-provider-1', alg: 'ES256', use: 'sig' };
const issuer = `http://127.0.0.1:${port}`;

// stdout carries the one ready line (a reader may stop reading after it): notices go to stderr.
console.info = console.error;
console.log = console.error;
process.stdout.on('error', () => {});

const resources = options.resources ?? [resource];
const opaque = new Set(options.opaque === true ? resources : options.opaque || []);
const RESOURCE_SCOPES = ['mcp', 'ops'];
const TTL = options.ttl ?? 300;
const account = { sub: 'alice', groups: [], ...options.account };

const html = (title, body) => `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>${title}</title></head>
<body><h1>${title}</h1>${body}</body></html>`;
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
const withButtons = (form, buttons) => form.replace('</form>', `${buttons}</form>`);
const CONFIRM = '<button id="confirm" type="submit">Continue</button> '
  + '<button id="abort" type="submit" name="abort" value="yes">Abort</button>';
const CONTINUE = '<button id="continue" type="submit">Continue</button>';
const LOGOUT = '<input type="hidden" name="logout" value="yes"/>'
  + '<button id="logout" type="submit">Sign out</button>';

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: 'client_secret_basic',
  }, ...(options.clients ?? [])],
  clientDefaults: {
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'ES256',
  },
  jwks: { keys: [key] },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  // The resource scopes are listed too, so the metadata's scopes_supported names them (what an
  // MCP client asks for when the resource's own metadata names none).
  scopes: ['openid', 'offline_access', ...RESOURCE_SCOPES],
  claims: { groups: ['groups'], email: ['email'] },
  conformIdTokenClaims: false,
  findAccount: (_ctx, id) => ({
    accountId: id,
    claims: () => ({ sub: id, groups: account.groups, email: account.email }),
  }),
  extraTokenClaims: (_ctx, token) => (token.accountId ? { groups: account.groups } : undefined),
  issueRefreshToken: (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  pkce: { required: () => true },
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? TTL,
    ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? TTL,
    DeviceCode: () => 600,
    Grant: () => 14 * 24 * 3600,
    IdToken: () => 3600,
    Interaction: () => 600,
    RefreshToken: () => 14 * 24 * 3600,
    Session: () => 14 * 24 * 3600,
  },
  renderError: (ctx, out) => {
    ctx.type = 'html';
    ctx.body = html('error', `<pre>${JSON.stringify(out, null, 2).replace(/</g, '&lt;')}</pre>`);
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    registration: { enabled: options.registration === true },
    // oidc-provider's own policies, spelled out: a confidential client may introspect any token,
    // a public one only its own; a client revokes only its own.
    introspection: {
      enabled: true,
      allowedPolicy: (_ctx, client, token) => (
        client.clientAuthMethod !== 'none' || token.clientId === client.clientId
      ),
    },
    revocation: {
      enabled: true,
      allowedPolicy: (_ctx, client, token) => {
        if (token.clientId === client.clientId) return true;
        if (client.clientAuthMethod === 'none') return false;
        throw new errors.InvalidRequest('client is not authorized to revoke the presented token');
      },
    },
    deviceFlow: {
      enabled: true,
      userCodeInputSource: (ctx, form, _out, err) => {
        const why = err ? `<p>The code was not accepted: ${esc(err.error_description ?? err.message)}</p>` : '';
        ctx.body = html('Sign-in', `${why}${withButtons(form, CONTINUE)}`);
      },
      userCodeConfirmSource: (ctx, form, client, _deviceInfo, userCode) => {
        const who = esc(client.clientName ?? client.clientId);
        const shown = `<p>${who} shows the code <code>${userCode}</code>.</p>`;
        ctx.body = html('Confirm device', `${shown}${withButtons(form, CONFIRM)}`);
      },
      successSource: (ctx) => {
        ctx.body = html('Device signed in', '<p>The device is signed in: close this page.</p>');
      },
    },
    rpInitiatedLogout: {
      enabled: true,
      // The person confirms nothing either: the form submits itself (#logout without script).
      logoutSource: (ctx, form) => {
        ctx.body = html('Sign out', `${withButtons(form, LOGOUT)}<script>document.forms[0].submit()</script>`);
      },
      postLogoutSuccessSource: (ctx) => {
        ctx.body = html('Signed out', '<p>You are signed out.</p>');
      },
    },
    resourceIndicators: {
      enabled: true,
      defaultResource: (ctx, _client, oneOf) => {
        if (oneOf) return oneOf;
        const scopes = String(ctx.oidc.params.scope ?? '').split(' ');
        return scopes.includes('openid') ? undefined : resources[0];
      },
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (!resources.includes(indicator)) throw new errors.InvalidTarget();
        return {
          scope: RESOURCE_SCOPES.join(' '),
          audience: indicator,
          accessTokenFormat: opaque.has(indicator) ? 'opaque' : 'jwt',
          accessTokenTTL: TTL,
          ...(opaque.has(indicator) ? {} : { jwt: { sign: { alg: 'ES256' } } }),
        };
      },
    },
  },
});

for (const event of ['server_error', 'authorization.error', 'grant.error', 'registration_create.error',
  'introspection.error', 'revocation.error', 'end_session.error', 'code_verification.error']) {
  provider.on(event, (_ctx, err) => {
    console.error(`oidc-provider ${event}: ${err?.message} ${err?.error_description ?? ''}`);
  });
}

// The interactions (login, then consent) complete at once: the person is already signed in.
async function interact(req, res) {
  const { prompt, params, session, grantId } = await provider.interactionDetails(req, res);
  if (prompt.name === 'login') {
    const login = { login: { accountId: account.sub } };
    await provider.interactionFinished(req, res, login, { mergeWithLastSubmission: false });
    return;
  }
  const grant = grantId
    ? await provider.Grant.find(grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const { missingOIDCScope, missingOIDCClaims, missingResourceScopes } = prompt.details;
  if (missingOIDCScope) grant.addOIDCScope(missingOIDCScope.join(' '));
  if (missingOIDCClaims) grant.addOIDCClaims(missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const consent = { consent: { grantId: await grant.save() } };
  await provider.interactionFinished(req, res, consent, { mergeWithLastSubmission: true });
}

const app = provider.callback();
createServer((req, res) => {
  if (!req.url.startsWith('/interaction/')) {
    app(req, res);
    return;
  }
  interact(req, res).catch((err) => {
    console.error(`oidc-provider interaction: ${err.message}`);
    res.statusCode = 400;
    res.setHeader('content-type', 'text/plain');
    res.end(`interaction failed: ${err.message}`);
  });
}).listen(Number(port), '127.0.0.1', () => {
  process.stdout.write(`oidc-provider listening on ${issuer}\n`);
});
