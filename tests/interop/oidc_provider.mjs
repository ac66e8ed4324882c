// A certified OpenID provider (panva's oidc-provider, pinned in package.json) for the OAuth
// tests (issue 50): issuer http://127.0.0.1:PORT with a P-256 key generated for the run, one
// confidential client allowed the client-credentials grant, and RFC 8707 resource indicators
// that issue JWT access tokens (RFC 9068, ES256) for RESOURCE only.
//
// node oidc_provider.mjs OIDC_PROVIDER_DIR PORT RESOURCE CLIENT_ID CLIENT_SECRET
import { generateKeyPairSync } from 'node:crypto';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkg, port, resource, clientId, clientSecret] = process.argv.slice(2);
const { default: Provider, errors } = await import(pathToFileURL(join(pkg, 'lib/index.js')));
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const key = { ...privateKey.export({ format: 'jwk' }), kid: 'oidc-provider-1', alg: 'ES256', use: 'sig' };
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'ES256',
  }],
  jwks: { keys: [key] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (indicator !== resource) throw new errors.InvalidTarget();
        return {
          scope: 'mcp',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: 300,
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
});
provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`oidc-provider listening on ${issuer}`);
});
