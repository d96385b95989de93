/**
 * Entry point of the root-infra Pulumi project (Pulumi.yaml `main`). Node strips the types of
 * this ESM module natively; the stack outputs are the program's result.
 */
import { infraProgram } from './program.ts';

export const { clusters } = await infraProgram();
