/**
 * fastify's `schemaController` option for the API: request validators (validation.ts) and response
 * serializers (serialization.ts) compiled once per distinct schema, at first use, in every context
 * of the app.
 */
import type { ValidatorFactory } from '@fastify/ajv-compiler';
import { buildSerializer } from './serialization.ts';
import { buildValidator } from './validation.ts';

export const schemaController = {
  compilersFactory: {
    // fastify types buildValidator as Ajv's own compile; it calls the compiler it returns with the
    // route's schema definition (FastifySchemaCompiler's argument), as buildValidator expects.
    buildValidator: buildValidator as unknown as ValidatorFactory,
    buildSerializer,
  },
};
