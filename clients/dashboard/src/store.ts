// The page's shared state: the agents as the live subscription last showed them, the
// connection's state, and notices. Views read it and re-render when `changed` fires.
import { useEffect, useState } from "preact/hooks";
import { token } from "./client";
import type { Agent, SubagentRun } from "./gen";

export type Connection = "connecting" | "live" | "reconnecting" | "token";

export interface Notice {
  id: number;
  text: string;
  kind: "info" | "attention" | "error";
  agentId?: string;
}

type Listener = () => void;

class Store {
  agents = new Map<string, Agent>();
  runs = new Map<string, SubagentRun>();
  connection: Connection = "connecting";
  /** Why the last connection attempt failed, while reconnecting. */
  connectionError = "";
  notices: Notice[] = [];
  /** The role of this tab's token (GetServerInfo's callerRole): "read" may only watch;
   * undefined until the daemon said. */
  role: string | undefined = undefined;
  /** Bumped on every change, so views can tell. */
  version = 0;
  private listeners = new Set<Listener>();
  private scheduled = false;
  private nextNotice = 1;

  listen(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Coalesces the changes of one batch of events into one re-render. */
  changed(): void {
    this.version++;
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      for (const fn of [...this.listeners]) fn();
    });
  }

  /** A read-only token, or a token whose role is not known yet: the page shows no control
   * it could not use (not even for a moment before GetServerInfo answers). */
  get readOnly(): boolean {
    return this.role === "read" || (this.role === undefined && token() !== "");
  }

  notify(text: string, kind: Notice["kind"] = "info", agentId?: string): void {
    const notice = { id: this.nextNotice++, text, kind, agentId };
    this.notices = [...this.notices.slice(-4), notice];
    this.changed();
    setTimeout(() => this.dismiss(notice.id), kind === "info" ? 6000 : 15000);
  }

  dismiss(id: number): void {
    const before = this.notices.length;
    this.notices = this.notices.filter((n) => n.id !== id);
    if (this.notices.length !== before) this.changed();
  }
}

export const store = new Store();

/** Re-render the calling component whenever the store changes. */
export function useStore(): Store {
  const [, setTick] = useState(0);
  useEffect(() => store.listen(() => setTick((t) => t + 1)), []);
  return store;
}
