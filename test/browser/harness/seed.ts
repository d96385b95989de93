/**
 * Seeds tenants straight into the database, the way the reconciler would have left them, for the
 * browser tests' fleet-sized pages (10,000 tenants in one statement): the builder seedConsoleFleet
 * of test/helpers/bulk.ts.
 */
export { seedConsoleFleet as seedTenants } from '../../helpers/bulk.ts';
