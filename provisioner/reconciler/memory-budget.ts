/**
 * Admission of engine runs by memory (PROVISIONER_ENGINE_MEMORY_MB), besides the worker count.
 *
 * Each run in this process holds a reservation: the peak memory a run of its kind adds to the
 * replica (ENGINE_RUN_PEAK_MB). A run is claimed before its kind is known (the claim takes the
 * tenant; the attempt then opens or picks its operation), so it is reserved at the largest
 * estimate and lowered to its kind's once the attempt has started. The claim loop asks for
 *
 *   free slots = min(workers − running, floor((budget − Σ reservations) / largest estimate))
 *
 * so a claim can never take the replica over its budget, whatever kinds it gets. One exception:
 * with nothing running, one run is admitted even when the largest estimate alone exceeds the
 * budget (a budget set too low slows the replica to one run at a time; it never stops it).
 * Budget 0: no memory admission, the worker count alone.
 */
import type { OperationKind } from '../store/states.ts';

/**
 * Peak memory one engine run adds to a replica, in MiB, by operation kind: the peak of the summed
 * RSS of the Pulumi CLI and its plugins, plus the provisioner's own RSS growth while the inline
 * program is evaluated in it (the largest of each, over the runs measured), rounded up to a
 * multiple of 32 MiB. Measured by bench/engine.bench.ts (`npm run bench -- engine`; docs/benchmarks.md
 * "Engine runs", 2026-11-26, with the real Kubernetes provider plugin 4.25.0, whose peaks are
 * 1.6–1.9× those of the test double measured before; delete measured 2026-11-27 with the real
 * vcluster, whose figures for the other kinds stayed under these).
 */
export const ENGINE_RUN_PEAK_MB = Object.freeze({
  create: 576, // measured 548 + 21
  update: 672, // as an upgrade: the same `up` over the whole program
  upgrade: 672, // 648 + 19
  suspend: 544, // 502 + 25
  resume: 512, // 494 + 18
  // Sleep and wake are a suspend and a resume of the control plane (the same program run).
  sleep: 544,
  wake: 512,
  // A claimed warm pool entry's names applied: an update of the whole program.
  bind: 672,
  delete: 480, // 475 + 4 (2026-11-27; estimated 448 from the double's ratio to create until then)
  // A periodic resync previews with refresh first (its refresh starts a second pair of provider
  // plugins), then may refresh and update one after the other.
  resync: 832, // 784 + 25 (the largest: 769, 766 and 784 measured)
  // A retry repeats an operation of any kind but a resync.
  retry: 672,
} satisfies Record<OperationKind, number>);

/** The largest estimate: what a run is reserved at until its kind is known. */
export const LARGEST_RUN_MB = Math.max(...Object.values(ENGINE_RUN_PEAK_MB));

/** The default budget: the worker count at the largest estimate (the budget then limits nothing the workers do not). */
export function defaultEngineMemoryMb(workers: number): number {
  return workers * LARGEST_RUN_MB;
}

export class MemoryBudget {
  /** MiB; 0: no budget. */
  readonly budgetMb: number;
  readonly #estimates: Readonly<Record<OperationKind, number>>;
  readonly #largest: number;
  readonly #held = new Map<string, number>();

  constructor(budgetMb: number, estimates: Readonly<Record<OperationKind, number>> = ENGINE_RUN_PEAK_MB) {
    this.budgetMb = budgetMb;
    this.#estimates = estimates;
    this.#largest = Math.max(...Object.values(estimates));
  }

  /** MiB reserved by the runs in this process now. */
  get inUseMb(): number {
    let sum = 0;
    for (const mb of this.#held.values()) sum += mb;
    return sum;
  }

  /** How many runs may be claimed now, with `freeWorkers` workers idle. */
  freeSlots(freeWorkers: number): number {
    if (freeWorkers <= 0) return 0;
    if (this.budgetMb <= 0) return freeWorkers;
    if (this.#held.size === 0) return Math.min(freeWorkers, Math.max(1, Math.floor(this.budgetMb / this.#largest)));
    return Math.min(freeWorkers, Math.max(0, Math.floor((this.budgetMb - this.inUseMb) / this.#largest)));
  }

  /** A claimed run, kind not known yet: reserved at the largest estimate. */
  reserve(id: string): void {
    this.#held.set(id, this.#largest);
  }

  /** The run's kind is known: its reservation becomes that kind's estimate. True when that freed memory. */
  settle(id: string, kind: OperationKind): boolean {
    const before = this.#held.get(id);
    if (before === undefined) return false;
    const now = this.#estimates[kind];
    this.#held.set(id, now);
    return now < before;
  }

  release(id: string): void {
    this.#held.delete(id);
  }
}
