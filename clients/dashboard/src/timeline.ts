// One agent's timeline as the page shows it: a contiguous run of rows of one epoch, from
// `first` to `next - 1`, loaded from its tail and paged backwards on demand, extended live.
//
// No gap, no duplicate (the CLI's `logs -f` rule): the subscription is live before the tail
// is fetched, so every row appended after the fetch arrives as an event; events that come
// while a fetch is in flight wait in order. A live row at or below what is held is dropped;
// one beyond the next expected seq is caught up from FetchTimeline AFTER first. Every change
// runs on one promise chain, so they apply in arrival order.
import { timeline as api, describe } from "./client";
import { onResync, onTimeline, type TimelineEvent } from "./events";
import { TimelineDirection, type FetchTimelineResponse, type TimelineRow } from "./gen";
import { store } from "./store";

const TAIL_ROWS = 200;
const OLDER_ROWS = 500;
const CATCH_UP_ROWS = 500;

type Listener = () => void;

export class TimelineModel {
  epoch = "";
  rows: TimelineRow[] = [];
  /** The seq the next live row must have. */
  next = 1n;
  hasOlder = false;
  loading = true;
  loadingOlder = false;
  error = "";
  /** Set when the page had to reload the timeline, saying why (shown to the person). */
  resetNote = "";
  version = 0;
  private chain: Promise<void> = Promise.resolve();
  private listeners = new Set<Listener>();
  private unsubscribe: Array<() => void> = [];
  private closed = false;

  constructor(readonly agentId: string) {
    this.unsubscribe.push(onTimeline((ev) => this.enqueue(() => this.live(ev))));
    this.unsubscribe.push(
      onResync((why) => this.enqueue(() => this.reload(why ? "the subscription was reset" : ""))),
    );
  }

  /** Starts loading once the subscription is live (rows appended from then on arrive as events). */
  start(): void {
    this.enqueue(() => this.reload(""));
  }

  close(): void {
    this.closed = true;
    for (const fn of this.unsubscribe) fn();
    this.listeners.clear();
  }

  listen(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  get first(): bigint {
    return this.rows.length ? this.rows[0].seq : this.next;
  }

  loadOlder(): void {
    if (this.loadingOlder || !this.hasOlder) return;
    this.loadingOlder = true;
    this.changed();
    this.enqueue(() => this.older());
  }

  private enqueue(job: () => Promise<void> | void): void {
    this.chain = this.chain
      .then(async () => {
        if (!this.closed) await job();
      })
      .catch((err) => {
        this.error = describe(err);
        this.changed();
      });
  }

  private changed(): void {
    this.version++;
    for (const fn of [...this.listeners]) fn();
  }

  private async fetch(direction: TimelineDirection, seq: bigint, limit: number) {
    return api.fetchTimeline({
      agentId: this.agentId,
      direction,
      cursor: this.epoch ? { epoch: this.epoch, seq } : undefined,
      limit,
    });
  }

  private async reload(reason: string): Promise<void> {
    this.loading = true;
    this.changed();
    // The tail is fetched at once, even before the subscription is live (a page opened cold
    // shows its rows sooner); rows stored between that answer and the subscription going
    // live are then fetched AFTER it, and everything later arrives as events.
    const live = store.connection === "live";
    this.take(await this.tail());
    this.resetNote = reason ? `Timeline reloaded: ${reason}.` : "";
    this.loading = false;
    this.error = "";
    this.changed();
    if (!live) {
      await waitLive();
      await this.catchUp(undefined);
      this.changed();
    }
  }

  /** The newest rows; while the daemon cannot be reached, again once it can. */
  private async tail(): Promise<FetchTimelineResponse> {
    for (;;) {
      try {
        return await this.fetch(TimelineDirection.TAIL, 0n, TAIL_ROWS);
      } catch (err) {
        if (store.connection === "live") throw err;
        this.error = describe(err);
        this.changed();
        await waitLive();
      }
    }
  }

  private take(page: FetchTimelineResponse): void {
    this.epoch = page.epoch;
    this.rows = page.rows;
    this.next = page.window?.nextSeq ?? 1n;
    this.hasOlder = page.hasOlder;
  }

  private async older(): Promise<void> {
    try {
      const page = await this.fetch(TimelineDirection.BEFORE, this.first, OLDER_ROWS);
      if (page.reset || page.epoch !== this.epoch) {
        this.take(page);
        this.resetNote = "Timeline reloaded: its history was re-based.";
        return;
      }
      const first = this.first;
      const older = page.rows.filter((r) => r.seq < first);
      this.rows = older.concat(this.rows);
      this.hasOlder = page.hasOlder;
    } finally {
      this.loadingOlder = false;
      this.changed();
    }
  }

  private async live(ev: TimelineEvent): Promise<void> {
    const value = ev.value;
    if (value.agentId !== this.agentId || this.loading) return;
    if (ev.case === "timelineReset") {
      if (ev.value.epoch !== this.epoch) {
        await this.reload(ev.value.reason || "the timeline was re-based");
      }
      return;
    }
    if (value.epoch !== this.epoch) return; // an old epoch's row, or a reset still to come
    if (ev.case === "timelineRowUpdated") {
      const row = this.rows.find((r) => r.seq === ev.value.seq);
      if (row) {
        row.providerMessageId = ev.value.providerMessageId;
        this.changed();
      }
      return;
    }
    const row = ev.value.row;
    if (!row || row.seq < this.next) return; // already held
    if (row.seq > this.next) await this.catchUp(row.seq);
    if (row.seq === this.next) {
      this.rows.push(row);
      this.next = row.seq + 1n;
      this.changed();
    }
  }

  /** Rows next .. until-1 (or to the end) from FetchTimeline AFTER. */
  private async catchUp(until: bigint | undefined): Promise<void> {
    while (until === undefined || this.next < until) {
      const page = await this.fetch(TimelineDirection.AFTER, this.next - 1n, CATCH_UP_ROWS);
      if (page.staleCursor || page.reset) return; // its timeline_reset is on the way
      const before = this.next;
      for (const row of page.rows) {
        if (row.seq === this.next && (until === undefined || row.seq < until)) {
          this.rows.push(row);
          this.next = row.seq + 1n;
        }
      }
      if (this.next === before || !page.hasNewer) return;
    }
  }
}

/** Resolves once the subscription is live (after `synced`). */
function waitLive(): Promise<void> {
  if (store.connection === "live") return Promise.resolve();
  return new Promise((resolve) => {
    const stop = store.listen(() => {
      if (store.connection === "live") {
        stop();
        resolve();
      }
    });
  });
}
