/**
 * Event ids of the tenant change streams (`/v1/tenants/:id/changes`, `/v1/tenants/events`): the
 * position in the platform-wide change sequence, encrypted (AES-256-GCM under the encryption key,
 * bound to the stream's scope), so a tenant learns nothing of other tenants' activity from the ids
 * it receives and cannot ask for a position it was not given. `0` (from the start) stays a plain
 * `0`. A client passes an id back unchanged as Last-Event-ID (or `after=`) to resume.
 */
import type { SecretBox } from '../crypto.ts';
import { errors } from '../errors.ts';
import { STREAM_CURSOR } from '../api/schemas.ts';

export { STREAM_CURSOR };
const CURSOR = new RegExp(STREAM_CURSOR);

const aad = (scope: string) => `stream-cursor/v1/${scope}`;

/** The opaque id of the position `seq` (a decimal string) in the stream `scope`. */
export function encodeStreamCursor(box: SecretBox, scope: string, seq: string): string {
  return seq === '0' ? '0' : box.encrypt(seq, aad(scope)).toString('base64url');
}

/**
 * The position an id of the stream `scope` stands for; 400 VALIDATION_FAILED naming `field` when
 * it is not one this stream gave out (changed, from another stream or tenant, or a plain number).
 */
export function decodeStreamCursor(box: SecretBox, scope: string, cursor: string, field: string): string {
  const refused = () =>
    errors.validation(`${field} must be the id of an event of this stream, passed back unchanged (or 0)`, field);
  if (!CURSOR.test(cursor)) throw refused();
  if (cursor === '0') return '0';
  let seq: string;
  try {
    seq = box.decrypt(Buffer.from(cursor, 'base64url'), aad(scope)).toString('utf8');
  } catch {
    throw refused();
  }
  if (!/^[0-9]{1,18}$/.test(seq)) throw refused();
  return seq;
}
