/**
 * Rules every route's request schemas follow, applied in one place when a route is registered
 * (so a new route cannot forget them, and the OpenAPI document shows them):
 *
 * - No string of a request (body, query, path, headers, and the keys of free-form objects) may
 *   hold a NUL character: PostgreSQL's text cannot store one, so it would otherwise end as a 500
 *   deep in a query. A string schema without its own pattern, format or enum gets the pattern
 *   NUL_FREE; one with a pattern must exclude NUL itself (checked here). Display texts (key
 *   names, cluster labels) refuse every control character (schemas.ts `DisplayText`).
 * - Every integer or number has a declared range (`minimum` and `maximum`), at most
 *   Number.MAX_SAFE_INTEGER (below PostgreSQL's bigint): registering a route without one fails
 *   at start-up, so `?after=1e21` is a 400 naming the field, never a database error.
 *
 * Shared schema objects (TypeBox constants) are never changed: the route gets a changed copy.
 */
import type { FastifyInstance, RouteOptions } from 'fastify';
import { errors } from '../errors.ts';
import { MAX_PATH_PARAM_LENGTH, NUL_FREE } from '../api/schemas.ts';

type Schema = Record<string, unknown>;

const PARTS = ['body', 'querystring', 'params', 'headers'] as const;
/** Formats whose values can hold no NUL (ajv-formats' definitions). */
const SAFE_FORMATS = new Set(['uuid', 'email', 'date-time', 'date', 'uri', 'hostname']);
const SUBSCHEMA_LISTS = ['anyOf', 'oneOf', 'allOf'] as const;

class RequestSchemaError extends Error {}

function isSchema(v: unknown): v is Schema {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function typesOf(s: Schema): string[] {
  const t = s.type;
  return Array.isArray(t) ? (t as string[]) : typeof t === 'string' ? [t] : [];
}

/** A pattern excludes NUL when a NUL-only string and a string with a NUL in the middle both fail it. */
function patternExcludesNul(pattern: string): boolean {
  const re = new RegExp(pattern, 'u');
  return !re.test('\u0000') && !re.test('a\u0000a') && !re.test('1\u00001');
}

/** The schema with the rules applied; `where` names it in start-up errors. */
export function applyRequestRules(schema: unknown, where: string): unknown {
  if (!isSchema(schema)) return schema;
  const out: Schema = { ...schema };
  const types = typesOf(out);
  if (types.includes('string') && out.enum === undefined && out.const === undefined) {
    if (typeof out.pattern === 'string') {
      if (!patternExcludesNul(out.pattern))
        throw new RequestSchemaError(`${where}: pattern ${out.pattern} lets a NUL character through`);
    } else if (typeof out.format !== 'string' || !SAFE_FORMATS.has(out.format)) {
      out.pattern = NUL_FREE;
    }
  }
  if (types.includes('integer') || types.includes('number')) {
    const { minimum, maximum } = out as { minimum?: unknown; maximum?: unknown };
    if (
      typeof minimum !== 'number' ||
      typeof maximum !== 'number' ||
      minimum < -Number.MAX_SAFE_INTEGER ||
      maximum > Number.MAX_SAFE_INTEGER
    )
      throw new RequestSchemaError(
        `${where}: a number needs a declared range (minimum and maximum, within ±Number.MAX_SAFE_INTEGER)`,
      );
  }
  if (isSchema(out.properties)) {
    out.properties = Object.fromEntries(
      Object.entries(out.properties).map(([k, v]) => [k, applyRequestRules(v, `${where}.${k}`)]),
    );
  }
  if (isSchema(out.patternProperties)) {
    out.patternProperties = Object.fromEntries(
      Object.entries(out.patternProperties).map(([k, v]) => [k, applyRequestRules(v, `${where}[${k}]`)]),
    );
  }
  if (isSchema(out.additionalProperties))
    out.additionalProperties = applyRequestRules(out.additionalProperties, `${where}[*]`);
  if (isSchema(out.items)) out.items = applyRequestRules(out.items, `${where}[]`);
  for (const list of SUBSCHEMA_LISTS) {
    const subs = out[list];
    if (Array.isArray(subs)) out[list] = subs.map((s, i) => applyRequestRules(s, `${where}/${list}/${i}`));
  }
  // The keys of a free-form object are strings too.
  const freeForm = isSchema(out.additionalProperties) || isSchema(out.patternProperties);
  if (types.includes('object') && freeForm)
    out.propertyNames = applyRequestRules(
      isSchema(out.propertyNames) ? out.propertyNames : { type: 'string' },
      `${where} (keys)`,
    );
  return out;
}

/**
 * The deepest nesting of arrays and objects a JSON body may have. Deeper bodies are refused
 * before anything walks them (a recursive walk of 30,000 levels overflows the stack); no body of
 * this API comes near it (a reported Kubernetes object nests some 15 levels).
 */
export const MAX_JSON_DEPTH = 100;

/** Whether a parsed JSON value nests arrays and objects deeper than `max` (an iterative walk). */
export function deeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [v, depth] = next;
    if (typeof v !== 'object' || v === null) continue;
    if (depth + 1 > max) return true;
    for (const child of Array.isArray(v) ? v : Object.values(v)) {
      if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
    }
  }
  return false;
}

/**
 * The path (`items.3.object.spec`) of the first string or key holding a NUL in a parsed JSON body
 * (`body` for the body itself), in document order; an iterative walk that builds a path only for
 * the value it reports.
 */
export function findNul(value: unknown): string | undefined {
  // Each entry: the value and the way to it (the parent's entry and the key), kept only as links.
  interface At {
    value: unknown;
    key?: string;
    parent?: At;
  }
  const pathOf = (at: At): string => {
    const keys: string[] = [];
    for (let a: At | undefined = at; a?.key !== undefined; a = a.parent) keys.push(a.key);
    return keys.reverse().join('.') || 'body';
  };
  const stack: At[] = [{ value }];
  for (let at = stack.pop(); at !== undefined; at = stack.pop()) {
    // A key with a NUL is reported as the object holding it (the key cannot be named).
    if (at.key?.includes('\u0000') && at.parent) return pathOf(at.parent);
    const v = at.value;
    if (typeof v === 'string') {
      if (v.includes('\u0000')) return pathOf(at);
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    const entries = Object.entries(v);
    for (let i = entries.length - 1; i >= 0; i--)
      stack.push({ value: entries[i]![1], key: entries[i]![0], parent: at });
  }
  return undefined;
}

/** Applies the rules to every route registered after this call (register it before the routes). */
export function installRequestRules(app: FastifyInstance): void {
  // Free-form JSON (a reported object, a summary) has no schema for its strings: the same rule,
  // checked on the parsed body (jsonb cannot hold NUL either).
  app.addHook('preValidation', async (request) => {
    if (typeof request.body !== 'object') return;
    // First: every later walk of the body (the NUL scan, validation, logging) may recurse.
    if (deeperThan(request.body, MAX_JSON_DEPTH))
      throw errors.validation(
        `the body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels (the limit)`,
        'body',
        { maxDepth: MAX_JSON_DEPTH },
      );
    const field = findNul(request.body);
    if (field !== undefined) throw errors.validation(`'${field}' must not contain NUL characters`, field);
  });
  app.addHook('onRoute', (route: RouteOptions) => {
    const schema = route.schema as Record<string, unknown> | undefined;
    if (!schema) return;
    for (const part of PARTS) {
      if (schema[part] !== undefined)
        schema[part] = applyRequestRules(schema[part], `${route.method.toString()} ${route.url} ${part}`);
    }
    // A valid path parameter must never meet the router's length limit (414) first.
    const params = (schema.params as Schema | undefined)?.properties;
    for (const [name, p] of Object.entries(isSchema(params) ? params : {})) {
      const max = isSchema(p) ? p.maxLength : undefined;
      if (name !== '*' && typeof max === 'number' && max > MAX_PATH_PARAM_LENGTH)
        throw new RequestSchemaError(
          `${route.url}: path parameter '${name}' allows ${max} characters, over the router's ${MAX_PATH_PARAM_LENGTH}`,
        );
    }
  });
}
