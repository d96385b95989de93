/**
 * Request validation: JSON bodies are validated strictly (a number is not a string, unknown
 * fields are refused); querystring, params and headers arrive as strings and are coerced to the
 * schema's types. fastify's default compiler coerces every part, hence two Ajv instances.
 */
import { Ajv, type Options } from 'ajv';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

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

export function installValidation(app: FastifyInstance): void {
  const strict = makeAjv(false);
  const coercing = makeAjv(true);
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? strict : coercing).compile(schema));
}
