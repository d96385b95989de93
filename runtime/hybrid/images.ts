/**
 * The images a hybrid runtime's install names, pinned as the catalog records them: the agents'
 * images from the release's registry (`images.registry`, else DEFAULT_AGENT_IMAGE_REPOSITORY),
 * each with its digest where the release pipeline recorded one (`images.agents`), and the images
 * the Argo charts render, with theirs (`images.charts`, by the reference the chart renders). An
 * image without a recorded digest keeps its tag alone and is listed as unpinned, so that what a
 * customer applies says which images are pinned and which are not. Pure: no I/O.
 */
import { IMAGE_DIGEST } from '../catalog.ts';
import { DEFAULT_AGENT_IMAGE_REPOSITORY } from '../component/agents.ts';
import type { RuntimeVersion } from '../versions.ts';

export class ImageDigestError extends Error {
  override name = 'ImageDigestError';
}

/** `image` with `digest` appended (`…:tag@sha256:…`); a digest that is not `sha256:` and 64 hex digits is refused. */
export function withDigest(image: string, digest: string | undefined, where: string): string {
  if (digest === undefined) return image;
  if (!IMAGE_DIGEST.test(digest))
    throw new ImageDigestError(`${where}: the digest '${digest}' of ${image} is not sha256: and 64 hex digits`);
  return image.includes('@') ? image : `${image}@${digest}`;
}

/** An agent's image at a catalog version: `<registry>/<name>:<agents tag>`, with its recorded digest. */
export function agentImage(version: RuntimeVersion, name: string, registryOverride?: string): string {
  const registry = registryOverride ?? version.images?.registry ?? DEFAULT_AGENT_IMAGE_REPOSITORY;
  const image = `${registry}/${name}:${version.components.agents}`;
  // A registry given for this bundle alone (tests) has no recorded digests.
  const digest = registryOverride === undefined ? version.images?.agents?.[name] : undefined;
  return withDigest(image, digest, `runtime version ${version.version}, images.agents['${name}']`);
}

type Obj = Record<string, unknown>;

/** The value at `path` in `o`, when every step is an object. */
function at(o: Obj, path: readonly string[]): Obj | undefined {
  let v: unknown = o;
  for (const key of path) v = typeof v === 'object' && v !== null ? (v as Obj)[key] : undefined;
  return typeof v === 'object' && v !== null ? (v as Obj) : undefined;
}

/** The pod spec of a workload object (Deployment, StatefulSet, DaemonSet, Job: template; CronJob: jobTemplate; Pod). */
function podSpecOf(o: Obj): Obj | undefined {
  if (o.kind === 'Pod') return at(o, ['spec']);
  if (o.kind === 'CronJob') return at(o, ['spec', 'jobTemplate', 'spec', 'template', 'spec']);
  return at(o, ['spec', 'template', 'spec']);
}

/** Every container of an object's pod spec (init, regular), each as it is in the object. */
function containersOf(o: Obj): Obj[] {
  const pod = podSpecOf(o);
  if (!pod) return [];
  return [...((pod.initContainers as Obj[] | undefined) ?? []), ...((pod.containers as Obj[] | undefined) ?? [])];
}

/** Pins the images of `objects` (changed in place) that `digests` has, by the reference as written. */
export function pinChartImages(objects: readonly Obj[], version: RuntimeVersion): void {
  const digests = version.images?.charts ?? {};
  for (const o of objects)
    for (const c of containersOf(o))
      if (typeof c.image === 'string')
        c.image = withDigest(
          c.image,
          digests[c.image],
          `runtime version ${version.version}, images.charts['${c.image}']`,
        );
}

/** The images of `objects` that carry no digest, each once, sorted. */
export function unpinnedImages(objects: readonly Obj[]): string[] {
  const out = new Set<string>();
  for (const o of objects)
    for (const c of containersOf(o)) if (typeof c.image === 'string' && !c.image.includes('@')) out.add(c.image);
  return [...out].sort();
}
