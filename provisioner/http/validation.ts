/**
 * Request validation: JSON bodies are validated strictly (a number is not a string, unknown
 * fields are refused); querystring, params and headers arrive as strings and are coerced to the
 * schema's types. fastify's default compiler coerces every part, hence two Ajv instances.
 *
 * A validator is compiled at the first request that needs it, once per distinct schema in the
 * process (like the response serializers, serialization.ts): an app does not compile the
 * validators of all its routes when it starts, and an app built again in the same process reuses
 * them. test/integration/api/route-map.test.ts compiles every one the app registers.
 */
import { Ajv, type Options, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifySchemaCompiler } from 'fastify';

function makeAjv(coerce: boolean): Ajv {
  const opts: Options = {
    coerceTypes: coerce ? 'array' : false,
    useDefaults: true,
    removeAdditional: false,
    allErrors: false,
    strict: false,
  };
  const ajv = new Ajv(opts);
  addFormats.default(ajv);
  return ajv;
}

/** The process's two Ajv instances, made when the first validator is compiled. */
let instances: { strict: Ajv; coercing: Ajv } | undefined;
const validators = new Map<string, { validate: Validator; compile: () => ValidateFunction; what: string }>();

/**
 * What fastify calls: Ajv's function signature (data and, for a root value Ajv may coerce, its
 * parent), its `errors` after a call, and `schemaEnv`, by which fastify knows to pass the parent.
 */
export interface Validator {
  (data: unknown, dataCxt?: unknown): boolean;
  errors?: ValidateFunction['errors'];
  schemaEnv: true;
}

/** The validator of `schema` for a request part: compiled at its first call, shared in the process. */
export function validatorFor(schema: unknown, httpPart: string | undefined, what = 'a request'): Validator {
  const mode = httpPart === 'body' ? 'strict' : 'coercing';
  const key = `${mode}\n${JSON.stringify(schema)}`;
  const known = validators.get(key);
  if (known) return known.validate;
  let compiled: ValidateFunction | undefined;
  const compile = () => (compiled ??= compileValidator(schema, mode));
  const validate = ((data: unknown, dataCxt?: unknown) => {
    const fn = compile();
    const valid = fn(data, dataCxt as Parameters<ValidateFunction>[1]);
    validate.errors = fn.errors;
    return valid;
  }) as Validator;
  validate.schemaEnv = true;
  validators.set(key, { validate, compile, what: `the ${httpPart ?? 'request'} of ${what}` });
  return validate;
}

/**
 * Compiles every validator of this process not compiled yet (what start-up did before they were
 * compiled at first use); throws the first refusal, naming its route and part. Returns how many
 * distinct validators there are.
 */
export function compileEveryValidator(): number {
  for (const { compile, what } of validators.values()) {
    try {
      compile();
    } catch (err) {
      throw new Error(`${what}: ${(err as Error).message}`, { cause: err });
    }
  }
  return validators.size;
}

/** Compiles `schema` now (what a validator's first call does); throws what Ajv refuses. */
export function compileValidator(schema: unknown, mode: 'strict' | 'coercing'): ValidateFunction {
  instances ??= { strict: makeAjv(false), coercing: makeAjv(true) };
  return instances[mode].compile(schema as object);
}

/**
 * For fastify's `schemaController.compilersFactory.buildValidator`: every context of the app, a
 * plugin that adds its own shared schemas included, validates with these two Ajv instances (with
 * app.setValidatorCompiler, such a plugin's routes fell back to fastify's default compiler, which
 * coerces bodies and drops unknown fields).
 */
export function buildValidator(): FastifySchemaCompiler<unknown> {
  return ({ schema, httpPart, method, url }) => validatorFor(schema, httpPart, `${method} ${url}`);
}
