// The prompt box. While a turn runs it offers the three ways a prompt can join it: queue
// (after the turn), steer (into the turn, when the provider can) and replace (cancel it and
// start this one). Ctrl+Enter (or Cmd+Enter) sends: plainly when idle, queued while running.
import type { JSX } from "preact";
import { useState } from "preact/hooks";
import { describe, randomId, turns } from "../client";
import { IfRunning, PromptDisposition } from "../gen";

const DISPOSITION: Record<number, string> = {
  [PromptDisposition.STARTED]: "Sent: a turn started.",
  [PromptDisposition.QUEUED]: "Queued: it runs when the current turn ends.",
  [PromptDisposition.STEERED]: "Steered into the running turn.",
  [PromptDisposition.REPLACED]: "Replaced: the running turn was canceled and this one started.",
};

export function PromptBox({
  agentId,
  running,
  closed,
}: {
  agentId: string;
  running: boolean;
  closed: boolean;
}): JSX.Element {
  const [text, setText] = useState("");
  const [busy, setBusy] = useState(false);
  const [status, setStatus] = useState("");

  const send = async (ifRunning: IfRunning) => {
    if (!text.trim() || busy) return;
    setBusy(true);
    setStatus("");
    try {
      const answer = await turns.sendPrompt({
        agentId,
        content: [{ part: { case: "text", value: text } }],
        clientMessageId: `web-${randomId(8)}`,
        ifRunning,
      });
      setText("");
      setStatus(DISPOSITION[answer.disposition] ?? "Sent.");
    } catch (err) {
      setStatus(describe(err));
    } finally {
      setBusy(false);
    }
  };

  const onKey = (e: KeyboardEvent) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      void send(running ? IfRunning.QUEUE : IfRunning.REJECT);
    }
  };

  return (
    <form class="prompt" onSubmit={(e) => e.preventDefault()} aria-label="Prompt">
      <label for="prompt-text" class="sr">
        Prompt
      </label>
      <textarea
        id="prompt-text"
        rows={2}
        value={text}
        disabled={closed}
        placeholder={closed ? "The agent is closed" : "Message the agent (Ctrl+Enter sends)"}
        onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
        onKeyDown={onKey}
      />
      <div class="buttons">
        {running ? (
          <>
            <button type="button" disabled={busy || closed} onClick={() => send(IfRunning.QUEUE)}>
              Queue
            </button>
            <button type="button" disabled={busy || closed} onClick={() => send(IfRunning.STEER)}>
              Steer
            </button>
            <button type="button" disabled={busy || closed} onClick={() => send(IfRunning.REPLACE)}>
              Replace
            </button>
          </>
        ) : (
          <button type="button" class="primary" disabled={busy || closed} onClick={() => send(IfRunning.REJECT)}>
            Send
          </button>
        )}
      </div>
      {status && (
        <div class="status" role="status">
          {status}
        </div>
      )}
    </form>
  );
}
