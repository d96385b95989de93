import t from 'tap';
import { loadConfig } from '../../provisioner/config.ts';
import { engineSecrets } from '../../provisioner/services.ts';

t.test('the state backend passwords and the passphrase are masked in operation logs', async (t) => {
  const config = loadConfig({
    PULUMI_CONFIG_PASSPHRASE: 'correct horse battery staple',
    PULUMI_BACKEND_URL: 'postgres://state:st%40te-secret-1@db.internal:5432/pulumi',
  });
  const secrets = engineSecrets(config, 'postgres://app:app-secret-22@127.0.0.1:5432/provisioner');
  t.ok(secrets.includes('app-secret-22'), 'the provisioner database password');
  t.ok(
    secrets.includes('st@te-secret-1') && secrets.includes('st%40te-secret-1'),
    'the backend password, decoded and as written',
  );
  t.ok(secrets.includes('correct horse battery staple'), 'the passphrase');
  t.same(engineSecrets(loadConfig({}), 'postgres://127.0.0.1/db'), [], 'nothing to mask without passwords');
});
