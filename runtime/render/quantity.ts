/**
 * Kubernetes resource quantities as numbers: CPU in millicores, memory in bytes. Enough of the
 * quantity grammar for what charts and plans write (decimal and binary suffixes, `m`, plain and
 * decimal numbers, exponents).
 */
const SUFFIX: Readonly<Record<string, number>> = {
  '': 1,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

const QUANTITY = /^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/;

/** The quantity's value in base units (cores, bytes); throws naming the text when it is not a quantity. */
export function parseQuantity(quantity: string | number): number {
  if (typeof quantity === 'number') return quantity;
  const m = QUANTITY.exec(quantity.trim());
  if (!m) throw new Error(`'${quantity}' is not a Kubernetes quantity`);
  return Number(m[1]) * SUFFIX[m[2] ?? '']!;
}

/** CPU in millicores (rounded up, as the API server rounds). */
export function milliCpu(quantity: string | number): number {
  return Math.ceil(Math.round(parseQuantity(quantity) * 1e6) / 1e3);
}

/** Memory in bytes. */
export function bytes(quantity: string | number): number {
  return Math.ceil(parseQuantity(quantity));
}

/** `1.25` (cores) from millicores, `250m` below one core. */
export function formatCpu(milli: number): string {
  if (milli < 1000) return `${milli}m`;
  return `${Number((milli / 1000).toFixed(3))}`;
}

/** `1.5Gi` from bytes at or above 1 GiB, `384Mi` below. */
export function formatMemory(value: number): string {
  if (value >= 2 ** 30) return `${Number((value / 2 ** 30).toFixed(2))}Gi`;
  return `${Number((value / 2 ** 20).toFixed(1))}Mi`;
}
