import t from 'tap';
import { createTestApi, uniqueOrg } from '../../helpers/api.ts';

const api = await createTestApi({ env: { PROVISIONER_SIGNUP_RATE_LIMIT: '3' } });
t.teardown(() => api.close());

t.test('signup is rate limited per client address with 429 and Retry-After', async (t) => {
  const send = (ip: string) =>
    api.app.inject({
      method: 'POST',
      url: '/v1/signup',
      remoteAddress: ip,
      payload: { organization: uniqueOrg(), email: 'a@b.io' },
    });
  for (let i = 0; i < 3; i++) t.equal((await send('10.1.1.1')).statusCode, 202);
  const limited = await send('10.1.1.1');
  t.equal(limited.statusCode, 429);
  t.equal(limited.json().error.code, 'RATE_LIMITED');
  t.ok(Number(limited.headers['retry-after']) > 0, 'Retry-After set');
  t.equal((await send('10.2.2.2')).statusCode, 202, 'another address is not limited');
});
