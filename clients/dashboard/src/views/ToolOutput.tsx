// A tool call's output that the daemon kept apart from its row (docs/api.md#tool-output): the
// row holds only a preview, so the page offers the rest and shows it as it is paged in
// (outputs.ts).
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import type { OutputRef } from "../gen";
import { outputLoad, startLoad, type OutputLoad } from "../outputs";

export function bytesText(n: number): string {
  return n.toLocaleString("en-US");
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
  const [load, setLoad] = useState<OutputLoad | undefined>(() => outputLoad(agentId, outputRef));
  const [, setTick] = useState(0);
  useEffect(() => {
    const rerender = () => setTick((t) => t + 1);
    const stop = load?.listen(rerender);
    rerender(); // what changed between this render and listening
    return stop;
  }, [load]);
  const size = Number(outputRef.sizeBytes);
  const loaded = load?.state;
  const busy = loaded !== undefined && !loaded.done && !loaded.error;
  return (
    <div class="tool-output" data-blob={outputRef.blobId}>
      {!loaded?.text && !loaded?.done && <pre class="preview">{preview}</pre>}
      {(!loaded || loaded.error) && (
        <button type="button" class="small show-all" onClick={() => setLoad(startLoad(agentId, outputRef))}>
          {bytesText(size)} bytes kept apart — {loaded ? "try again" : "show all"}
        </button>
      )}
      {loaded && (loaded.text || loaded.done) && (
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
