// The one live subscription (EventService.Subscribe, every agent) behind the whole page.
//
// Exactness: the page remembers the revision of the last event it applied and the
// incarnation of the event log it came from (from `synced` / `stream_ending`). A lost
// connection, a laptop lid or a daemon restart resumes with both, so the daemon replays
// exactly the missed events. When it cannot (`subscription_reset`, `synced.reset`, or a
// fresh snapshot), every view reloads what it shows and the page says so.
import { events, isAbort, isUnauthenticated, describe, server } from "./client";
import type { Agent, Event } from "./gen";
import { store } from "./store";

export type TimelineEvent = Extract<
  Event["payload"],
  { case: "timelineRowAppended" | "timelineRowUpdated" | "timelineReset" }
>;

type Resync = (reason: string) => void;

const timelineListeners = new Set<(ev: TimelineEvent) => void>();
const resyncListeners = new Set<Resync>();
const attentionListeners = new Set<(ev: Event) => void>();
const changesListeners = new Map<string, Set<() => void>>();

let lastRevision: bigint | undefined;
let incarnation = "";
let tokenWaiter: (() => void) | null = null;
let abort: AbortController | null = null;

export function onTimeline(fn: (ev: TimelineEvent) => void): () => void {
  timelineListeners.add(fn);
  return () => timelineListeners.delete(fn);
}

/** Called after every fresh snapshot that replaced the page's state (not after a resume). */
export function onResync(fn: Resync): () => void {
  resyncListeners.add(fn);
  return () => resyncListeners.delete(fn);
}

export function onAttention(fn: (ev: Event) => void): () => void {
  attentionListeners.add(fn);
  return () => attentionListeners.delete(fn);
}

/** The token prompt was answered: try again at once. */
export function retryNow(): void {
  tokenWaiter?.();
  abort?.abort();
}

let restarting = false;

/** Drop the stream and resume at once: a stream can stall silently (a laptop lid, a network
 * that changed) and only a call that fails tells. Resuming is exact, so this is always safe. */
export function reconnect(): void {
  if (!abort || store.connection !== "live") return;
  restarting = true;
  abort.abort();
}

export function resumePoint(): { revision: bigint | undefined; incarnation: string } {
  return { revision: lastRevision, incarnation };
}

const sleep = (ms: number, signal: Promise<void>) =>
  Promise.race([new Promise<void>((r) => setTimeout(r, ms)), signal]);

export async function follow(): Promise<void> {
  let delay = 0;
  for (;;) {
    const waitToken = new Promise<void>((r) => (tokenWaiter = r));
    if (delay) {
      await sleep(delay + Math.random() * delay * 0.3, waitToken);
    }
    const result = await subscribeOnce();
    if (result === "token") {
      store.connection = "token";
      store.changed();
      await waitToken;
      delay = 0;
      continue;
    }
    store.connection = "reconnecting";
    store.changed();
    // A clean end (the daemon drained) resumes at once; failures back off up to 8 s.
    delay = result === "ended" ? 100 : Math.min(Math.max(delay * 2, 500), 8000);
  }
}

async function subscribeOnce(): Promise<"ended" | "failed" | "token"> {
  abort = new AbortController();
  const state = new Session(lastRevision === undefined);
  const request =
    lastRevision === undefined
      ? {}
      : { resumeRevision: lastRevision, resumeIncarnation: incarnation };
  try {
    for await (const response of events.subscribe(request, { signal: abort.signal })) {
      for (const ev of response.events) state.handle(ev);
      store.changed();
    }
    return "ended";
  } catch (err) {
    if (isUnauthenticated(err)) return "token";
    if (isAbort(err) && restarting) return "ended";
    if (!isAbort(err)) store.connectionError = describe(err);
    return "failed";
  } finally {
    restarting = false;
  }
}

/** Called after each turn of the agent that changed what GetChanges answers (counts only). */
export function onChanges(agentId: string, fn: () => void): () => void {
  const set = changesListeners.get(agentId) ?? new Set();
  set.add(fn);
  changesListeners.set(agentId, set);
  return () => {
    set.delete(fn);
    if (!set.size) changesListeners.delete(agentId);
  };
}

/** What this tab's token may do (it may have changed with the token prompt). */
async function learnRole(): Promise<void> {
  try {
    const role = (await server.getServerInfo({})).callerRole;
    if (role !== store.role) {
      store.role = role;
      store.changed();
    }
  } catch {
    // Unknown for now: the next connection asks again.
  }
}

/** One stream's progress: whether it is still in a snapshot, and what a `synced` means. */
class Session {
  private snapshot: Map<string, Agent> | null;
  private reset = false;

  constructor(fresh: boolean) {
    this.snapshot = fresh ? new Map() : null;
  }

  handle(ev: Event): void {
    const p = ev.payload;
    switch (p.case) {
      case "agentUpserted":
        if (p.value.agent) (this.snapshot ?? store.agents).set(p.value.agent.id, p.value.agent);
        break;
      case "agentRemoved":
        store.agents.delete(p.value.agentId);
        break;
      case "subscriptionReset":
        this.snapshot = new Map();
        this.reset = true;
        break;
      case "synced":
        this.synced(p.value.revision, p.value.incarnation, p.value.reset);
        return;
      case "streamEnding":
        lastRevision = p.value.resumeRevision;
        incarnation = p.value.incarnation;
        return;
      case "timelineRowAppended":
      case "timelineRowUpdated":
      case "timelineReset":
        for (const fn of [...timelineListeners]) fn(p);
        break;
      case "subagentRunUpdated":
        if (p.value.run) store.runs.set(p.value.runId, p.value.run);
        break;
      case "attentionRequired":
        for (const fn of [...attentionListeners]) fn(ev);
        break;
      case "changesUpdated":
        for (const fn of [...(changesListeners.get(p.value.agentId) ?? [])]) fn();
        break;
      default:
        break;
    }
    if (ev.revision > 0n) lastRevision = ev.revision;
  }

  private synced(revision: bigint, inc: string, reset: boolean): void {
    const replaced = this.snapshot !== null;
    const hadState = lastRevision !== undefined || this.reset;
    if (this.snapshot !== null) {
      store.agents = this.snapshot;
      this.snapshot = null;
    }
    lastRevision = revision;
    incarnation = inc;
    store.connection = "live";
    store.connectionError = "";
    void learnRole();
    // A snapshot that replaced earlier state: what the views show may be behind it. (The very
    // first snapshot replaces nothing: views load after it, or catch up once it is in.)
    if (replaced && hadState) {
      const why =
        reset || this.reset
          ? "The daemon could not replay what this page missed: everything shown was reloaded."
          : "";
      if (why) store.notify(why, "info");
      for (const fn of [...resyncListeners]) fn(why);
    }
    this.reset = false;
  }
}
