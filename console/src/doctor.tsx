/**
 * What keeps tenants from being provisioned, as `provisioner doctor` reports it: the console reads
 * the same checks from GET /v1/doctor (the engine as its last check found it, each root cluster
 * probed now). Operators only; a tenant key gets none.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { client, type DoctorCheck, type DoctorReport } from './api.ts';

export interface Doctor {
  report: DoctorReport | null;
  /** When the answer came (the clusters' "last check"). */
  checkedAt: string | null;
  reload: () => void;
}

export function useDoctor(enabled: boolean): Doctor {
  const [report, setReport] = useState<DoctorReport | null>(null);
  const [checkedAt, setCheckedAt] = useState<string | null>(null);
  const load = useRef(() => {});
  load.current = () => {
    if (!enabled) return;
    client.call('GET /v1/doctor').then(
      (r) => (setReport(r), setCheckedAt(new Date().toISOString())),
      () => {},
    );
  };
  useEffect(() => load.current(), [enabled]);
  return { report, checkedAt, reload: () => load.current() };
}

/** The checks with status `problem`: while one is left, no tenant is provisioned here. */
export function BlockingBanner({ report }: { report: DoctorReport | null }) {
  const problems = report?.checks.filter((c) => c.status === 'problem') ?? [];
  if (problems.length === 0) return null;
  return (
    <div class="blocking" role="alert" aria-labelledby="blocking-title" data-blocking={problems.length}>
      <strong id="blocking-title">
        Tenants are not provisioned here until{' '}
        {problems.length === 1 ? 'this is fixed' : `these ${problems.length} problems are fixed`} (
        <code>provisioner doctor</code>):
      </strong>
      <ul>
        {problems.map((c: DoctorCheck) => (
          <li key={c.name} data-check={c.name}>
            <span class="check-name">{c.name}</span>: {c.message}
            {c.fix.length > 0 && (
              <ul class="fix">
                {c.fix.map((f) => (
                  <li key={f}>
                    <code>{f}</code>
                  </li>
                ))}
              </ul>
            )}
          </li>
        ))}
      </ul>
    </div>
  );
}
