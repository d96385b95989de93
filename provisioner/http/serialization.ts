/**
 * Response serializers. fastify compiles a fast-json-stringify function for every route and every
 * status code its schema names, when the app starts, and each of those compiles checks every
 * shared schema (app.addSchema) again: for this API about 800 compiles of a few dozen distinct
 * schemas, some 2 CPU-s per app built (docs/benchmarks.md, "App start-up"). The compile here is
 * fastify's own (its SerializerSelector, with the same options and shared schemas), but:
 *
 * - **once per distinct schema in the process**: the routes answering the same schema (every
 *   route's error answers are one ErrorBody) share one function, and an app built again in the
 *   same process (a test's second app, a replica) reuses them; the key is the schema's JSON and
 *   the shared schemas' JSON, so nothing compiled for other shared schemas is reused;
 * - **at the first answer that needs it**, not at start-up: an answer's first serialization
 *   compiles its schema (a few milliseconds, once), and a schema no answer uses is never compiled.
 *   A schema fast-json-stringify refuses would therefore fail at its first answer instead of at
 *   start-up: test/integration/api/route-map.test.ts compiles every one the app registers.
 */
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';

type Serializer = (data: unknown) => string;
type RouteDefinition = { method: string; url: string; httpStatus: string; schema?: unknown };

const upstream = SerializerSelector();

/** Each distinct set of shared schemas and options seen, by its JSON: a short id for the keys below. */
const sharedIds = new Map<string, number>();
/** Compiled (or to be compiled at first use) serializers of this process, by shared schemas and schema. */
const serializers = new Map<string, { serialize: Serializer; compile: () => Serializer; route: RouteDefinition }>();

/** For fastify's `schemaController.compilersFactory.buildSerializer`. */
export function buildSerializer(externalSchemas?: unknown, options?: Parameters<typeof upstream>[1]) {
  const compile = upstream(externalSchemas, options);
  const sharedJson = JSON.stringify([externalSchemas ?? null, options ?? null]);
  let shared = sharedIds.get(sharedJson);
  if (shared === undefined) sharedIds.set(sharedJson, (shared = sharedIds.size));
  return (route: RouteDefinition): Serializer => {
    const key = `${shared}\n${JSON.stringify(route.schema ?? null)}`;
    const known = serializers.get(key);
    if (known) return known.serialize;
    let compiled: Serializer | undefined;
    const entry = {
      route,
      compile: () => (compiled ??= compile(route)),
      serialize: (data: unknown) => entry.compile()(data),
    };
    serializers.set(key, entry);
    return entry.serialize;
  };
}

/**
 * Compiles every serializer of this process not compiled yet (what start-up did before they were
 * compiled at first use); throws the first refusal, naming its route and status. Returns how many
 * distinct serializers there are.
 */
export function compileEverySerializer(): number {
  for (const { compile, route } of serializers.values()) {
    try {
      compile();
    } catch (err) {
      throw new Error(`the ${route.httpStatus} answer of ${route.method} ${route.url}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
  return serializers.size;
}
