/**
 * The pool for attempt bookkeeping (operation start, log lines, outcomes): its sessions run with
 * synchronous_commit=off, so these commits do not wait for the WAL flush. Safe because the
 * reconciler is level-triggered: a Postgres crash can lose only the last fraction of a second of
 * such commits (never part of one), and a lost start or outcome is redone by the next reconcile
 * (the lease then expires; engine runs are idempotent). Leases (claims, heartbeats, hand-backs)
 * stay on the durable pool: mutual exclusion never depends on an unflushed commit.
 */
import type pg from 'pg';
import type { DatabaseHealth } from '../db/availability.ts';
import { createPool } from '../db/database.ts';

export function createWritePool(url: string, max = 10, health?: DatabaseHealth): pg.Pool {
  return createPool(url, max, health, { options: '-c synchronous_commit=off' });
}
