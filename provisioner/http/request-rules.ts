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
import { MAX_PATH_PARAM_LENGTH, NUL_FREE } from './schemas.ts';

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
 * Whether any string or key of a parsed JSON body holds a NUL: the check every body gets, without
 * building the path of each value it passes (findNul does that, for the one body that has one).
 */
function hasNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\u0000');
  if (typeof value !== 'object' || value === null) return false;
  if (Array.isArray(value)) {
    for (const v of value) if (hasNul(v)) return true;
    return false;
  }
  for (const k in value) {
    if (k.includes('\u0000') || hasNul((value as Record<string, unknown>)[k])) return true;
  }
  return false;
}

/** The path (`items.3.object.spec`) of the first string or key holding a NUL in a parsed JSON body. */
export function findNul(value: unknown, path = ''): string | undefined {
  if (path === '' && !hasNul(value)) return undefined;
  if (typeof value === 'string') return value.includes('\u0000') ? path || 'body' : undefined;
  if (typeof value !== 'object' || value === null) return undefined;
  for (const [k, v] of Object.entries(value)) {
    const at = path ? `${path}.${k}` : k;
    if (k.includes('\u0000')) return path || 'body';
    const found = findNul(v, at);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** Applies the rules to every route registered after this call (register it before the routes). */
export function installRequestRules(app: FastifyInstance): void {
  // Free-form JSON (a reported object, a summary) has no schema for its strings: the same rule,
  // checked on the parsed body (jsonb cannot hold NUL either).
  app.addHook('preValidation', async (request) => {
    const field = typeof request.body === 'object' ? findNul(request.body) : undefined;
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
