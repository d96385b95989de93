/**
 * A tiny ustar writer plus gzip: enough to package Helm charts (`helm package` writes a gzipped
 * tar of `<chart>/Chart.yaml`, `<chart>/values.yaml`, `<chart>/templates/…`).
 */
import { gzipSync } from 'node:zlib';

export interface TarEntry {
  /** Path inside the archive, `/`-separated, at most 100 bytes. */
  path: string;
  content: string | Buffer;
}

function octal(value: number, width: number): string {
  // width - 1 octal digits followed by a NUL.
  return value.toString(8).padStart(width - 1, '0') + '\0';
}

function header(path: string, size: number, mtime: number): Buffer {
  const h = Buffer.alloc(512, 0);
  const name = Buffer.from(path, 'utf8');
  if (name.length > 100) throw new Error(`tar: path too long: ${path}`);
  name.copy(h, 0);
  h.write(octal(0o644, 8), 100, 'ascii');
  h.write(octal(0, 8), 108, 'ascii');
  h.write(octal(0, 8), 116, 'ascii');
  h.write(octal(size, 12), 124, 'ascii');
  h.write(octal(mtime, 12), 136, 'ascii');
  h.write('        ', 148, 'ascii'); // checksum placeholder: eight spaces
  h.write('0', 156, 'ascii'); // regular file
  h.write('ustar\0', 257, 'ascii');
  h.write('00', 263, 'ascii');
  let sum = 0;
  for (const byte of h) sum += byte;
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'ascii');
  return h;
}

/** The gzipped tar of the entries (regular files only; directories are implied by paths). */
export function tarGz(entries: TarEntry[], mtime = Math.floor(Date.now() / 1000)): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    const body = typeof e.content === 'string' ? Buffer.from(e.content, 'utf8') : e.content;
    parts.push(header(e.path, body.length, mtime), body);
    const pad = (512 - (body.length % 512)) % 512;
    if (pad) parts.push(Buffer.alloc(pad, 0));
  }
  parts.push(Buffer.alloc(1024, 0));
  return gzipSync(Buffer.concat(parts));
}
