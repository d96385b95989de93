/**
 * Opaque, signed pagination cursors: base64url(JSON position) + "." + base64url(HMAC). A cursor
 * that was changed by the client fails verification and is answered with 400 INVALID_CURSOR.
 */
import type { SecretBox } from '../crypto.ts';
import { errors } from '../errors.ts';

export interface Position {
  ts: string;
  id: string;
}

export function encodeCursor(box: SecretBox, kind: string, pos: Position): string {
  const body = Buffer.from(JSON.stringify([kind, pos.ts, pos.id])).toString('base64url');
  return `${body}.${box.mac(body).toString('base64url')}`;
}

export function decodeCursor(box: SecretBox, kind: string, cursor: string): Position {
  const [body, mac, extra] = cursor.split('.');
  if (!body || !mac || extra !== undefined || !box.verifyMac(body, Buffer.from(mac, 'base64url')))
    throw errors.invalidCursor();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
  } catch {
    throw errors.invalidCursor();
  }
  if (
    !Array.isArray(parsed) ||
    parsed.length !== 3 ||
    parsed[0] !== kind ||
    typeof parsed[1] !== 'string' ||
    typeof parsed[2] !== 'string'
  ) {
    throw errors.invalidCursor();
  }
  return { ts: parsed[1], id: parsed[2] };
}
