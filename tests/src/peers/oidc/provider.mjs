// The OpenID provider of Herald's sign-in tests: oidc-provider (https://github.com/panva/node-oidc-provider,
// an OpenID Certified implementation), with one confidential client, PKCE required, the users given on the
// command line and their role claim in the `profile` scope. Its own development login page
// (devInteractions: any password) is the page the browser signs in at; consent is granted by the provider
// for this first-party client.
//
//   node provider.mjs '{"client_id":…,"client_secret":…,"redirect_uri":…,"users":{"li":{"name":"Li Wei","roles":["herald-ops"]}}}'
//
// Prints the port it listens on (loopback, chosen by the system) as its first line; the issuer is
// http://127.0.0.1:PORT. The test changes the users while it runs:
//   PUT    /_users/{id}  {"name":…,"roles":[…]}   add or replace (demote, promote)
//   DELETE /_users/{id}                          remove: the provider no longer knows them
import http from 'node:http';
import Provider from 'oidc-provider';

const config = JSON.parse(process.argv[2]);
const users = new Map(Object.entries(config.users ?? {}));

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: [{
    client_id: config.client_id,
    client_secret: config.client_secret,
    redirect_uris: [config.redirect_uri],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  pkce: { required: () => true },
  claims: { openid: ['sub'], profile: ['name', 'roles'] },
  cookies: { keys: ['herald-tests-oidc-peer-cookie-key'] },
  features: { devInteractions: { enabled: true } },
  ttl: { AccessToken: 3600, AuthorizationCode: 60, IdToken: 3600, Interaction: 600, Session: 3600, Grant: 3600 },
  async findAccount(ctx, id) {
    const user = users.get(id);
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        // Read at every call: a change through /_users shows at the next userinfo request.
        const now = users.get(id);
        return { sub: id, name: now?.name ?? id, roles: now?.roles ?? [] };
      },
    };
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope('openid profile');
    grant.addOIDCClaims(['name', 'roles']);
    await grant.save();
    return grant;
  },
});

const handle = provider.callback();
server.on('request', (req, res) => {
  const match = /^\/_users\/([^/?]+)$/.exec(req.url);
  if (!match) return handle(req, res);
  const id = decodeURIComponent(match[1]);
  if (req.method === 'DELETE') {
    users.delete(id);
    res.writeHead(204).end();
    return undefined;
  }
  let body = '';
  req.on('data', (chunk) => { body += chunk; });
  req.on('end', () => {
    try {
      users.set(id, JSON.parse(body));
      res.writeHead(204).end();
    } catch (error) {
      res.writeHead(400).end(String(error));
    }
  });
  return undefined;
});

process.stdout.write(`${port}\n`);
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
