// Words for states and reasons: every state is written out (and carries a symbol), so the
// page never relies on colour alone.
import { AttentionReason, CancelOutcome, ToolCallStatus, type Agent } from "./gen";
import type { Timestamp } from "@bufbuild/protobuf/wkt";

export type StateName = "initializing" | "idle" | "running" | "errored" | "closed" | "unknown";

export function stateOf(agent: Agent): StateName {
  return (agent.lifecycle?.state.case as StateName | undefined) ?? "unknown";
}

export const STATE_SYMBOL: Record<StateName, string> = {
  initializing: "◌",
  idle: "○",
  running: "▶",
  errored: "✕",
  closed: "■",
  unknown: "?",
};

export function attentionText(agent: Agent): string {
  if (!agent.attention?.required) return "";
  switch (agent.attention.reason) {
    case AttentionReason.FINISHED:
      return "finished";
    case AttentionReason.ERROR:
      return "error";
    case AttentionReason.PERMISSION:
      return "needs permission";
    default:
      return "attention";
  }
}

export function agentName(agent: Agent): string {
  return agent.title || `agent ${agent.id.slice(0, 8)}`;
}

export function toolStatus(status: ToolCallStatus): string {
  switch (status) {
    case ToolCallStatus.PENDING:
      return "… pending";
    case ToolCallStatus.RUNNING:
      return "▶ running";
    case ToolCallStatus.COMPLETED:
      return "✓ completed";
    case ToolCallStatus.FAILED:
      return "✕ failed";
    case ToolCallStatus.CANCELED:
      return "■ canceled";
    default:
      return "? unknown";
  }
}

export function cancelText(outcome: CancelOutcome): string {
  switch (outcome) {
    case CancelOutcome.NOT_RUNNING:
      return "Nothing to cancel: no turn was running (or it had already ended).";
    case CancelOutcome.SETTLED:
      return "Canceled: the turn has ended.";
    case CancelOutcome.REFUSED:
      return "Refused: the provider did not stop the turn, which goes on.";
    default:
      return "Cancel answered without an outcome.";
  }
}

export function time(ts: Timestamp | undefined): string {
  if (!ts) return "";
  const d = new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1e6));
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

export function json(value: unknown): string {
  try {
    return JSON.stringify(value, null, 2) ?? "";
  } catch {
    return String(value);
  }
}
