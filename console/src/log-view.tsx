/**
 * An operation's log, virtualised: only the rows in view (and a few around) are in the DOM, so a
 * log of 100,000 lines costs what one screen costs. The lines there are come in pages of JSON,
 * new ones through the follow stream, which starts after the last line held and resumes after a
 * disconnect from the last line received (Last-Event-ID = its seq); a line whose
 * seq is not above the last one kept is dropped, so none is shown twice.
 *
 * Long lines wrap: in the monospace font each visual row holds the same number of characters
 * (breaks anywhere), so a line's height is known from its length and the box's width without
 * laying it out, and the rows' offsets are running sums of those heights.
 */
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, client, type LogLine as Line, type LogPage, type Operation } from './api.ts';
import { openStream, type Stream, type StreamStatus } from './sse.ts';
import { Banner, ErrorBox } from './util.tsx';

type OperationState = Operation['state'];

const ROW = 18;
const HEIGHT = 432;
/** What a row's text gives up to the left padding (8 px) and the line number column (64 + 12 px). */
const GUTTER = 84;
const OVERSCAN = 10;
/** Lines per backlog request (the API's largest page). */
const PAGE = 5000;

/** `onState`: the operation's state as the log reports it (its page, then the stream's state and end events). */
export function LogView({ operationId, onState }: { operationId: string; onState?: (state: OperationState) => void }) {
  const lines = useRef<Line[]>([]);
  const [count, setCount] = useState(0);
  const [state, setState] = useState<OperationState | ''>('');
  const onStateRef = useRef(onState);
  onStateRef.current = onState;
  useEffect(() => {
    if (state) onStateRef.current?.(state);
  }, [state]);
  const [status, setStatus] = useState<StreamStatus>('connecting');
  const [error, setError] = useState<ApiError | null>(null);
  const [follow, setFollow] = useState(true);
  const [search, setSearch] = useState('');
  const [scrollTop, setScrollTop] = useState(0);
  const box = useRef<HTMLDivElement>(null);
  const probe = useRef<HTMLSpanElement>(null);
  const atBottom = useRef(true);
  // Characters per visual row: from the box's width and the font's character width, again on resize.
  const [cols, setCols] = useState(0);
  useEffect(() => {
    const el = box.current;
    const p = probe.current;
    if (!el || !p) return;
    const measure = () => {
      const char = p.getBoundingClientRect().width / p.textContent.length;
      if (char > 0) setCols(Math.max(8, Math.floor((el.clientWidth - GUTTER) / char)));
    };
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);

  useEffect(() => {
    lines.current = [];
    setCount(0);
    setState('');
    setError(null);
    setFollow(true);
  }, [operationId]);

  // Following: the backlog in pages of 5,000 lines (JSON, much cheaper than one event per line),
  // then one stream from the last line held; unfollowing closes it (following again resumes).
  useEffect(() => {
    if (!follow) return;
    let frame = 0;
    let s: Stream | null = null;
    const abort = new AbortController();
    const keep = (items: Line[]) => {
      const held = lines.current;
      for (const l of items) {
        const top = held.length > 0 ? held[held.length - 1]!.seq : 0;
        if (l.seq > top) held.push(l);
      }
      // One render per frame, whatever the rate of lines.
      frame ||= requestAnimationFrame(() => {
        frame = 0;
        setCount(held.length);
      });
    };
    const run = async () => {
      for (;;) {
        const after = lines.current.at(-1)?.seq ?? 0;
        let page: LogPage;
        try {
          page = await client.call('GET /v1/operations/:id/log', {
            params: { id: operationId },
            query: { after, limit: PAGE },
            signal: abort.signal,
          });
        } catch (err) {
          if (abort.signal.aborted) return;
          if (err instanceof ApiError && err.status >= 400 && err.status < 500) {
            setError(err);
            setStatus('failed');
            return;
          }
          break; // the stream below retries until the provisioner answers
        }
        keep(page.items);
        setState(page.state);
        if (page.items.length < PAGE) break;
      }
      if (abort.signal.aborted) return;
      const last = lines.current.at(-1)?.seq;
      s = openStream('GET /v1/operations/:id/log', {
        params: { id: operationId },
        query: { follow: '1' },
        ...(last !== undefined ? { lastEventId: String(last) } : {}),
        onStatus: (st, err) => {
          setStatus(st);
          if (err) setError(err);
          if (st === 'ended') setFollow(false);
        },
        onEvents: (events) => {
          const items: Line[] = [];
          for (const e of events) {
            if (e.event === 'line') items.push(e.data);
            else if (e.event === 'state') setState(e.data.state);
            // `unknown`: the operation is gone; the state shown stays the last one known.
            else if (e.event === 'end' && e.data.state !== 'unknown') setState(e.data.state);
          }
          // The stream sends the state once, then lines until its end: a line means the operation runs.
          if (items.length > 0) setState((st) => (st === 'queued' ? 'running' : st));
          keep(items);
        },
      });
    };
    void run();
    return () => {
      abort.abort();
      s?.close();
      // The last lines may still wait for their frame (an `end` right after them): show them now.
      cancelAnimationFrame(frame);
      setCount(lines.current.length);
    };
  }, [operationId, follow]);

  const matches = useMemo(() => {
    if (!search) return null;
    const needle = search.toLowerCase();
    const out: number[] = [];
    const held = lines.current;
    for (let i = 0; i < held.length; i++) if (held[i]!.line.toLowerCase().includes(needle)) out.push(i);
    return out;
    // count: new lines are searched too
  }, [search, count]);
  const total = matches ? matches.length : count;

  // tops[i]: the offset of row i; tops[total]: the height of them all. Extended as lines arrive
  // (the common case while following), computed again when the search or the width changes.
  const offsets = useRef<{ key: string; tops: number[] }>({ key: '', tops: [0] });
  const tops = useMemo(() => {
    const key = `${cols}|${search}`;
    const o = offsets.current;
    if (o.key !== key || o.tops.length - 1 > total) offsets.current = { key, tops: [0] };
    const out = offsets.current.tops;
    const held = lines.current;
    for (let i = out.length - 1; i < total; i++) {
      const len = held[matches ? matches[i]! : i]?.line.length ?? 0;
      out.push(out[i]! + ROW * (cols > 0 ? Math.max(1, Math.ceil(len / cols)) : 1));
    }
    return out;
  }, [total, matches, cols, search]);
  /** The first row whose bottom is below `y`. */
  const rowAt = (y: number) => {
    let lo = 0;
    let hi = total;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (tops[mid + 1]! <= y) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };

  // Keep the newest line in view while following, unless the reader scrolled up.
  useEffect(() => {
    const el = box.current;
    if (el && follow && atBottom.current && !search) {
      el.scrollTop = el.scrollHeight;
      setScrollTop(el.scrollTop);
    }
  }, [count, follow, search]);

  const first = Math.max(0, rowAt(scrollTop) - OVERSCAN);
  const last = Math.min(total, rowAt(scrollTop + HEIGHT) + 1 + OVERSCAN);
  const rows = [];
  for (let i = first; i < last; i++) {
    const at = matches ? matches[i]! : i;
    const l = lines.current[at];
    if (!l) continue;
    rows.push(
      <div
        class={`line ${l.stream}`}
        key={l.seq}
        data-seq={l.seq}
        style={{ transform: `translateY(${tops[i]}px)`, height: `${tops[i + 1]! - tops[i]!}px` }}
      >
        <span class="seq" data-line={at + 1} title={`line ${at + 1} of ${count}`}>
          {at + 1}
        </span>
        <span class="text">{l.line}</span>
      </div>,
    );
  }

  const download = () => {
    const text = lines.current.map((l) => `${l.seq}\t${l.at}\t${l.stream}\t${l.line}\n`).join('');
    const url = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
    const a = document.createElement('a');
    a.href = url;
    a.download = `operation-${operationId}.log`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  const held = lines.current;

  return (
    <section class="log" aria-label="Operation log">
      <Banner status={follow ? status : 'closed'} />
      <div class="log-tools">
        <button
          type="button"
          aria-pressed={follow}
          onClick={() => setFollow(!follow)}
          disabled={status === 'ended' && !follow && state !== 'running' && state !== 'queued'}
        >
          {follow ? 'Unfollow' : 'Follow'}
        </button>
        <label>
          Search the log
          <input type="search" value={search} onInput={(e) => setSearch(e.currentTarget.value)} />
        </label>
        <button type="button" onClick={download} disabled={count === 0}>
          Download
        </button>
        <span
          class="log-stats"
          data-lines={count}
          data-first-seq={held[0]?.seq ?? ''}
          data-last-seq={held.at(-1)?.seq ?? ''}
        >
          {count.toLocaleString('en')} line{count === 1 ? '' : 's'}
          {matches ? `, ${matches.length.toLocaleString('en')} matching` : ''} · operation {state || '…'} ·{' '}
          {follow ? (status === 'open' ? 'following' : status) : 'not following'}
        </span>
      </div>
      <ErrorBox error={error} />
      <div
        class="log-lines"
        ref={box}
        tabIndex={0}
        role="log"
        aria-label="Log lines"
        onScroll={(e) => {
          const el = e.currentTarget;
          atBottom.current = el.scrollTop + el.clientHeight >= el.scrollHeight - ROW;
          setScrollTop(el.scrollTop);
        }}
      >
        <span class="char-probe" ref={probe} aria-hidden="true">
          0123456789
        </span>
        <div class="log-space" style={{ height: `${tops[total] ?? 0}px` }}>
          {rows}
        </div>
      </div>
    </section>
  );
}
