/**
 * A tiny ustar writer and reader plus gzip: enough to package and repackage Helm charts (`helm package` writes a gzipped
 * tar of `<chart>/Chart.yaml`, `<chart>/values.yaml`, `<chart>/templates/…`).
 */
import { gunzipSync, gzipSync } from 'node:zlib';

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

function field(h: Buffer, offset: number, length: number): string {
  const raw = h.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString('utf8');
}

/**
 * The regular files of a gzipped tar (what `helm package` writes: ustar headers, with the ustar
 * name prefix and PAX `path` records for long names). Directories, links and other entries are
 * skipped.
 */
export function untarGz(archive: Buffer): TarEntry[] {
  const data = gunzipSync(archive);
  const out: TarEntry[] = [];
  let offset = 0;
  let paxPath: string | undefined;
  while (offset + 512 <= data.length) {
    const h = data.subarray(offset, offset + 512);
    if (h.every((b) => b === 0)) break;
    const size = parseInt(field(h, 124, 12).trim() || '0', 8);
    const type = field(h, 156, 1) || '0';
    const prefix = field(h, 257, 6).startsWith('ustar') ? field(h, 345, 155) : '';
    const name = paxPath ?? (prefix ? `${prefix}/${field(h, 0, 100)}` : field(h, 0, 100));
    const body = data.subarray(offset + 512, offset + 512 + size);
    offset += 512 + Math.ceil(size / 512) * 512;
    if (type === 'x') {
      // PAX extended header: "<len> key=value\n" records; only `path` matters here.
      paxPath = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(body.toString('utf8'))?.[1];
      continue;
    }
    paxPath = undefined;
    if (type === '0' || type === '7') out.push({ path: name, content: Buffer.from(body) });
  }
  return out;
}
