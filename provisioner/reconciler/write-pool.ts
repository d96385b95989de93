/**
 * The pool for attempt bookkeeping (operation start, log lines, outcomes): its sessions run with
 * synchronous_commit=off, so these commits do not wait for the WAL flush. Safe because the
 * reconciler is level-triggered: a Postgres crash can lose only the last fraction of a second of
 * such commits (never part of one), and a lost start or outcome is redone by the next reconcile
 * (the lease then expires; engine runs are idempotent). Leases (claims, heartbeats, hand-backs)
 * stay on the durable pool: mutual exclusion never depends on an unflushed commit.
 */
import pg from 'pg';
import { CONNECT_TIMEOUT_MS, guardPool, type DatabaseHealth } from '../db/availability.ts';

export function createWritePool(url: string, max = 10, health?: DatabaseHealth): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    options: '-c synchronous_commit=off',
  });
  return guardPool(pool, health);
}
