// A tool call's output that the daemon kept apart from its row (docs/api.md#tool-output): the
// row holds only a preview, so the page offers the rest and pages it in with FetchToolOutput,
// one page at a time (the next asked for only once the last has arrived, so a huge output
// never has more than one page's bytes in flight), showing what has come so far as it comes.
import { Code, ConnectError } from "@connectrpc/connect";
import type { JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { describe, isAbort, timeline } from "../client";
import type { OutputRef } from "../gen";

// Bytes asked for per page: well under a browser's comfortable message size, and small enough
// that the first part shows quickly.
const PAGE_BYTES = 1024 * 1024;

interface Loaded {
  text: string;
  bytes: number;
  done: boolean;
  error: string;
}

const NONE: Loaded = { text: "", bytes: 0, done: false, error: "" };

export function bytesText(n: number): string {
  return n.toLocaleString("en-US");
}

/** Why a page failed, in words: a blob that is gone says so plainly. */
function failure(err: unknown, bytes: number): string {
  if (err instanceof ConnectError && err.code === Code.NotFound) {
    const why = "(its row was rewound, dropped by retention or evicted)";
    return bytes > 0
      ? `The rest of the output is no longer kept ${why}: only what is shown above arrived.`
      : `The whole output is no longer kept ${why}: only the preview above is left.`;
  }
  return `Could not load the output: ${describe(err)}`;
}

export function ToolOutput({
  agentId,
  outputRef,
  preview,
}: {
  agentId: string;
  outputRef: OutputRef;
  preview: string;
}): JSX.Element {
  const [loaded, setLoaded] = useState<Loaded | null>(null);
  const abort = useRef<AbortController | null>(null);
  useEffect(() => () => abort.current?.abort(), []);
  const size = Number(outputRef.sizeBytes);

  async function load(): Promise<void> {
    const controller = new AbortController();
    abort.current = controller;
    const decoder = new TextDecoder();
    let state: Loaded = { ...NONE };
    setLoaded(state);
    try {
      while (state.bytes < size) {
        const page = await timeline.fetchToolOutput(
          { agentId, blobId: outputRef.blobId, offset: BigInt(state.bytes), limit: PAGE_BYTES },
          { signal: controller.signal },
        );
        if (page.data.length === 0) break; // the output ended before its size: keep what came
        // `stream`: a character cut between two pages is held back until its rest arrives.
        state = { ...state, text: state.text + decoder.decode(page.data, { stream: true }) };
        state.bytes += page.data.length;
        setLoaded(state);
      }
      setLoaded({ ...state, text: state.text + decoder.decode(), done: true });
    } catch (err) {
      if (isAbort(err) || controller.signal.aborted) return;
      setLoaded({ ...state, error: failure(err, state.bytes) });
    }
  }

  const busy = loaded !== null && !loaded.done && !loaded.error;
  return (
    <div class="tool-output" data-blob={outputRef.blobId}>
      {!loaded?.text && !loaded?.done && <pre class="preview">{preview}</pre>}
      {loaded === null && (
        <button type="button" class="small show-all" onClick={() => void load()}>
          {bytesText(size)} bytes kept apart — show all
        </button>
      )}
      {loaded !== null && (loaded.text || loaded.done) && (
        <pre class="all" data-done={loaded.done ? "1" : "0"}>
          {loaded.text}
        </pre>
      )}
      {busy && (
        <div class="progress" role="status">
          Loading… {bytesText(loaded.bytes)} of {bytesText(size)} bytes
        </div>
      )}
      {loaded?.error && (
        <div class="error-text" role="alert">
          {loaded.error}{" "}
          {loaded.bytes > 0 && `(${bytesText(loaded.bytes)} of ${bytesText(size)} bytes had arrived.)`}
        </div>
      )}
    </div>
  );
}
