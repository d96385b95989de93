/**
 * Plan names are looked up by own property only: a name every object inherits (`constructor`,
 * `toString`, `__proto__`, `hasOwnProperty`) is no plan, in the provisioner's service, the
 * offline renderer and the tenant program's settings check alike.
 */
import t from 'tap';
import { DEFAULT_PLAN, PLAN_NAMES, PLANS, planOf } from '../../tenants/plans.ts';
import { planNamed, RenderError } from '../../runtime/render/render.ts';
import { TENANT_FIELDS } from '../../tenants/config.ts';
import { catalog } from '../../runtime/catalog.ts';

const INHERITED = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__'];

t.test('an inherited name is no plan; every plan is found by its name', async (t) => {
  for (const name of INHERITED) {
    t.equal(planOf(name), undefined, `planOf('${name}') finds no plan`);
    t.throws(() => planNamed(name), RenderError, `the renderer refuses plan '${name}'`);
    t.match(
      TENANT_FIELDS.plan.problem!(name, catalog) ?? 'accepted',
      new RegExp(`unknown plan '${name}'`),
      `the tenant program refuses plan '${name}'`,
    );
  }
  for (const name of PLAN_NAMES) t.equal(planOf(name), PLANS[name], `planOf('${name}') is the ${name} plan`);
  t.equal(planNamed(DEFAULT_PLAN).name, DEFAULT_PLAN, 'the renderer finds the default plan');
});
