/**
 * The runtime's own description served by GET /api/runtime: its version and the version of every
 * component, from the runtime ConfigMap's values (a mounted JSON file, re-read when it changes, or
 * given at start).
 */
import { readFile, stat } from 'node:fs/promises';

export interface RuntimeInfo {
  runtimeVersion: string;
  components: Record<string, string>;
}

/** Accepts `{version|runtimeVersion, components: {name: version}}`; throws naming what is wrong. */
export function parseRuntimeInfo(value: unknown, source: string): RuntimeInfo {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error(`${source}: expected a JSON object`);
  const o = value as Record<string, unknown>;
  const version = o.runtimeVersion ?? o.version;
  if (typeof version !== 'string' || version === '') throw new Error(`${source}: 'version' must be a non-empty string`);
  const comps = o.components;
  if (typeof comps !== 'object' || comps === null || Array.isArray(comps))
    throw new Error(`${source}: 'components' must be an object of name: version`);
  const components: Record<string, string> = {};
  for (const [k, v] of Object.entries(comps)) {
    if (typeof v !== 'string') throw new Error(`${source}: components.${k} must be a string`);
    components[k] = v;
  }
  return { runtimeVersion: version, components };
}

export type RuntimeInfoSource = () => Promise<RuntimeInfo>;

export function staticRuntimeInfo(info: RuntimeInfo): RuntimeInfoSource {
  return () => Promise.resolve(info);
}

/** Reads `path` again whenever its modification time changes (ConfigMap volumes update in place). */
export function fileRuntimeInfo(path: string): RuntimeInfoSource {
  let cached: { mtimeMs: number; info: RuntimeInfo } | null = null;
  return async () => {
    const st = await stat(path);
    if (cached && cached.mtimeMs === st.mtimeMs) return cached.info;
    const info = parseRuntimeInfo(JSON.parse(await readFile(path, 'utf8')), path);
    cached = { mtimeMs: st.mtimeMs, info };
    return info;
  };
}
