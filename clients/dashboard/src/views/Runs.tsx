// The sub-agent runs an agent asked for: listed once when the page opens (ListSubagentRuns),
// then kept current by the subscription's `subagent_run_updated` events.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { subagents } from "../client";
import { SubagentOutcome, type SubagentRun } from "../gen";
import { useStore } from "../store";

const OUTCOME: Record<number, string> = {
  [SubagentOutcome.OK]: "✓ ok",
  [SubagentOutcome.ERROR]: "✕ error",
  [SubagentOutcome.TIMEOUT]: "✕ timed out",
  [SubagentOutcome.KILLED]: "■ killed",
  [SubagentOutcome.UNKNOWN]: "? unknown",
};

export function Runs({ agentId }: { agentId: string }): JSX.Element | null {
  const store = useStore();
  const [listed, setListed] = useState<SubagentRun[]>([]);
  useEffect(() => {
    subagents
      .listSubagentRuns({ agentId })
      .then((answer) => setListed(answer.runs))
      .catch(() => undefined);
  }, [agentId]);
  const runs = new Map(listed.map((r) => [r.runId, r]));
  for (const run of store.runs.values()) {
    if (run.requesterAgentId === agentId) runs.set(run.runId, run);
  }
  if (!runs.size) return null;
  return (
    <details class="runs">
      <summary>Sub-agent runs ({runs.size})</summary>
      <ul>
        {[...runs.values()].map((run) => (
          <li key={run.runId}>
            <a href={`#/agent/${run.childAgentId}`}>{run.label || run.task.slice(0, 80)}</a>{" "}
            <span class="status">
              {run.outcome ? OUTCOME[run.outcome] ?? "ended" : "▶ running"}
            </span>
            {run.endReason && <span class="meta"> ({run.endReason})</span>}
          </li>
        ))}
      </ul>
    </details>
  );
}
