// Tool outputs kept apart from their rows (docs/api.md#tool-output), paged in with
// FetchToolOutput one page at a time: the next page is asked for only once the last has
// arrived, so a huge output never has more than one page's bytes in flight. A load lives here,
// not in the row's component, because the windowed timeline drops rows that scroll out of view:
// a row that comes back shows the load where it is. The few most recent loads are kept.
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, isAbort, timeline } from "./client";
import type { OutputRef } from "./gen";

// Bytes asked for per page: well under a browser's comfortable message size, and small enough
// that the first part shows quickly.
const PAGE_BYTES = 1024 * 1024;
// Loads kept (each up to the 64 MiB an output may hold): older ones are dropped, and aborted.
const KEEP = 4;

export interface Loaded {
  text: string;
  bytes: number;
  done: boolean;
  error: string;
}

export class OutputLoad {
  state: Loaded = { text: "", bytes: 0, done: false, error: "" };
  private readonly listeners = new Set<() => void>();
  private readonly controller = new AbortController();

  constructor(
    private readonly agentId: string,
    private readonly ref: OutputRef,
  ) {}

  listen(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  abort(): void {
    this.controller.abort();
  }

  private set(state: Loaded): void {
    this.state = state;
    for (const fn of this.listeners) fn();
  }

  async run(): Promise<void> {
    const size = Number(this.ref.sizeBytes);
    const decoder = new TextDecoder();
    let state = this.state;
    try {
      while (state.bytes < size) {
        const page = await timeline.fetchToolOutput(
          { agentId: this.agentId, blobId: this.ref.blobId, offset: BigInt(state.bytes), limit: PAGE_BYTES },
          { signal: this.controller.signal },
        );
        if (page.data.length === 0) break; // the output ended before its size: keep what came
        // `stream`: a character cut between two pages is held back until its rest arrives.
        const text = state.text + decoder.decode(page.data, { stream: true });
        state = { ...state, text, bytes: state.bytes + page.data.length };
        this.set(state);
      }
      this.set({ ...state, text: state.text + decoder.decode(), done: true });
    } catch (err) {
      if (isAbort(err) || this.controller.signal.aborted) return;
      this.set({ ...state, error: failure(err, state.bytes) });
    }
  }
}

const loads = new Map<string, OutputLoad>(); // oldest first

function key(agentId: string, ref: OutputRef): string {
  return `${agentId}/${ref.blobId}`;
}

/** The load of this output already started, if any. */
export function outputLoad(agentId: string, ref: OutputRef): OutputLoad | undefined {
  return loads.get(key(agentId, ref));
}

/** Starts (again, after a failure) loading the whole of this output. */
export function startLoad(agentId: string, ref: OutputRef): OutputLoad {
  const k = key(agentId, ref);
  loads.get(k)?.abort();
  loads.delete(k);
  const load = new OutputLoad(agentId, ref);
  loads.set(k, load);
  while (loads.size > KEEP) {
    const [oldest, old] = loads.entries().next().value as [string, OutputLoad];
    old.abort();
    loads.delete(oldest);
  }
  void load.run();
  return load;
}

/** Why a page failed, in words: an output that is gone says so plainly. */
function failure(err: unknown, bytes: number): string {
  if (err instanceof ConnectError && err.code === Code.NotFound) {
    const why = "(its row was rewound, dropped by retention or evicted)";
    return bytes > 0
      ? `The rest of the output is no longer kept ${why}: only what is shown above arrived.`
      : `The whole output is no longer kept ${why}: only the preview above is left.`;
  }
  return `Could not load the output: ${describe(err)}`;
}
