// The timeline, windowed: only the rows in (and a little around) the viewport are in the
// DOM. Row heights are measured as rows render (estimated until then) and kept by seq, so
// the scroll position holds on to the row at the top of the viewport while older pages are
// prepended or rows change height, and sticks to the bottom while new rows stream in.
import type { JSX } from "preact";
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import type { TimelineRow } from "../gen";
import type { TimelineModel } from "../timeline";
import { Row } from "./Row";

const ESTIMATE = 72;
const OVERSCAN = 800;
const HEAD = 40;
const LOAD_OLDER_AT = 600;

interface Anchor {
  seq: bigint;
  delta: number;
}

export function TimelineList({
  model,
  onFork,
}: {
  model: TimelineModel;
  onFork?: (row: TimelineRow) => void;
}): JSX.Element {
  const scroller = useRef<HTMLDivElement>(null);
  const heights = useRef(new Map<bigint, number>());
  const stick = useRef(true);
  const anchor = useRef<Anchor | null>(null);
  const positioned = useRef(false);
  // The scrollTop this component last set (-1: none pending).
  const placed = useRef(-1);
  const [, setTick] = useState(0);
  const rerender = () => setTick((t) => t + 1);

  useEffect(() => model.listen(rerender), [model]);

  // A new epoch (the timeline was re-based): its seqs name other rows; start at the bottom.
  const epoch = useRef(model.epoch);
  if (epoch.current !== model.epoch) {
    epoch.current = model.epoch;
    heights.current.clear();
    anchor.current = null;
    stick.current = true;
  }

  const rows = model.rows;
  const offsets = new Float64Array(rows.length + 1);
  for (let i = 0; i < rows.length; i++) {
    offsets[i + 1] = offsets[i] + (heights.current.get(rows[i].seq) ?? ESTIMATE);
  }
  const el = scroller.current;
  const total = offsets[rows.length];
  const height = el?.clientHeight ?? 1000;
  // Stuck to the bottom (where the view starts), the window is the newest rows whatever the
  // scroll position says before the layout effect moves it.
  const y = !el || stick.current ? Math.max(0, total - height) : el.scrollTop - HEAD;
  const start = Math.max(0, search(offsets, y - OVERSCAN) - 1);
  const end = Math.min(rows.length, search(offsets, y + height + OVERSCAN) + 1);

  const indexOf = (seq: bigint) => Number(seq - (rows[0]?.seq ?? 0n));

  /** The row at the top of the viewport and how far into it the view is. */
  const capture = () => {
    const s = scroller.current;
    if (!s) return;
    const i = Math.max(0, search(offsets, s.scrollTop - HEAD) - 1);
    if (rows[i]) anchor.current = { seq: rows[i].seq, delta: s.scrollTop - HEAD - offsets[i] };
  };

  useLayoutEffect(() => {
    const s = scroller.current;
    if (!s) return;
    let changed = false;
    for (const node of s.querySelectorAll<HTMLElement>("[data-seq]")) {
      const seq = BigInt(node.dataset.seq!);
      const h = node.offsetHeight;
      if (heights.current.get(seq) !== h) {
        heights.current.set(seq, h);
        changed = true;
      }
    }
    if (changed) {
      rerender();
      return;
    }
    if (stick.current) {
      s.scrollTop = s.scrollHeight;
      placed.current = s.scrollTop;
      if (rows.length && !model.loading) positioned.current = true;
    } else if (anchor.current) {
      const i = indexOf(anchor.current.seq);
      if (i >= 0 && i < rows.length) {
        const want = HEAD + offsets[i] + anchor.current.delta;
        if (Math.abs(s.scrollTop - want) > 1) s.scrollTop = want;
        placed.current = s.scrollTop;
      }
    }
    // Still near the top after a page came in (no scroll event will come): the next one.
    if (positioned.current && s.scrollTop < LOAD_OLDER_AT) model.loadOlder();
  });

  // One observer for the viewport and the rendered rows: a row that changes height (a
  // details opened, a wider window) re-renders, and only then.
  const observer = useRef<ResizeObserver | null>(null);
  const observed = useRef(new Set<Element>());
  useEffect(() => {
    const watch = new ResizeObserver((entries) => {
      let changed = false;
      for (const entry of entries) {
        const node = entry.target as HTMLElement;
        if (node.dataset.seq === undefined) {
          changed = true;
          continue;
        }
        if (heights.current.get(BigInt(node.dataset.seq)) !== node.offsetHeight) changed = true;
      }
      if (changed) rerender();
    });
    if (scroller.current) watch.observe(scroller.current);
    observer.current = watch;
    return () => watch.disconnect();
  }, []);
  useLayoutEffect(() => {
    const watch = observer.current;
    if (!watch || !scroller.current) return;
    for (const node of observed.current) {
      if (!node.isConnected) {
        watch.unobserve(node);
        observed.current.delete(node);
      }
    }
    for (const node of scroller.current.querySelectorAll("[data-seq]")) {
      if (!observed.current.has(node)) {
        watch.observe(node);
        observed.current.add(node);
      }
    }
  });

  const onScroll = () => {
    const s = scroller.current;
    // Only a scroll the person made decides whether the view follows new rows: the event of
    // a position this component set may come after heights changed again.
    if (s && Math.abs(s.scrollTop - placed.current) > 1) {
      stick.current = s.scrollTop + s.clientHeight >= s.scrollHeight - 40;
      placed.current = -1;
    }
    capture();
    // Older rows only once the view has been placed at the bottom (its first scroll events
    // come from that placement).
    if (s && positioned.current && s.scrollTop < LOAD_OLDER_AT) model.loadOlder();
    rerender();
  };

  return (
    <>
      {model.resetNote && (
        <div class="notice-inline" role="status">
          ↻ {model.resetNote}
        </div>
      )}
      {model.error && (
        <div class="error-text" role="alert">
          {model.error}
        </div>
      )}
    <div
      class="scroller"
      ref={scroller}
      onScroll={onScroll}
      tabIndex={0}
      role="log"
      aria-label="Timeline"
      aria-busy={model.loading}
    >
      <div class="older" style={{ height: `${HEAD}px` }}>
        {model.loadingOlder
          ? "Loading older rows…"
          : model.hasOlder
            ? (
                <button type="button" class="link" onClick={() => model.loadOlder()}>
                  Load older rows
                </button>
              )
            : model.loading
              ? "Loading…"
              : rows.length
                ? "Beginning of the timeline"
                : "Nothing in the timeline yet"}
      </div>
      <div style={{ height: `${offsets[start]}px` }} />
      {rows.slice(start, end).map((row) => (
        <div class="rowwrap" key={String(row.seq)} data-seq={String(row.seq)}>
          <Row row={row} onFork={onFork} agentId={model.agentId} />
        </div>
      ))}
      <div style={{ height: `${offsets[rows.length] - offsets[end]}px` }} />
    </div>
    </>
  );
}

/** The index of the first offset greater than `y` (offsets ascending). */
function search(offsets: Float64Array, y: number): number {
  let lo = 0;
  let hi = offsets.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (offsets[mid] > y) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
