import type { Services } from '../services.ts';

/** What route plugins get: the process's services (services.ts), built once, never read from globals. */
export type AppContext = Services;
