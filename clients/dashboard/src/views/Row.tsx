// One timeline row, rendered by its item's kind. Text from agents goes through Markdown
// (text only, never markup); tool input and output are shown as JSON text.
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema, type Value } from "@bufbuild/protobuf/wkt";
import type { JSX } from "preact";
import { json, time, toolStatus } from "../format";
import type { TimelineRow } from "../gen";
import { Markdown } from "../markdown";
import { ToolOutput } from "./ToolOutput";

function valueText(value: Value | undefined): string {
  if (!value) return "";
  const plain = toJson(ValueSchema, value);
  return typeof plain === "string" ? plain : json(plain);
}

/** `onFork`: offer "Fork from here" on user messages (a new agent of the rows before it).
 * `agentId`: whose row it is, to fetch a tool output kept apart from it. */
export function Row({
  row,
  onFork,
  agentId,
}: {
  row: TimelineRow;
  onFork?: (row: TimelineRow) => void;
  agentId?: string;
}): JSX.Element {
  const item = row.item?.kind;
  const meta = (
    <span class="meta">
      #{String(row.seq)} · {time(row.timestamp)}
    </span>
  );
  switch (item?.case) {
    case "userMessage":
      return (
        <div class="row user" data-kind="user">
          <div class="who">
            You {meta}
            {onFork && (
              <button
                type="button"
                class="small link fork"
                onClick={() => onFork(row)}
                aria-label={`Fork from message #${String(row.seq)}: a new agent of the conversation before it`}
              >
                ⑂ Fork from here
              </button>
            )}
          </div>
          <Markdown text={item.value.text} />
        </div>
      );
    case "assistantMessage":
      return (
        <div class="row assistant" data-kind="assistant">
          <div class="who">Agent {meta}</div>
          <Markdown text={item.value.text} />
        </div>
      );
    case "reasoning":
      return (
        <details class="row reasoning" data-kind="reasoning">
          <summary>
            Thinking {meta}
          </summary>
          <Markdown text={item.value.text} />
        </details>
      );
    case "toolCall": {
      const call = item.value;
      const input = valueText(call.input);
      const output = valueText(call.output);
      return (
        <details class="row tool" data-kind="tool" data-status={call.status}>
          <summary>
            <span class="tool-name">Tool {call.name}</span>{" "}
            <span class="status">{toolStatus(call.status)}</span> {meta}
          </summary>
          {input && (
            <>
              <div class="label">Input</div>
              <pre>{input}</pre>
            </>
          )}
          {call.outputRef && agentId ? (
            <>
              <div class="label">Result</div>
              <ToolOutput key={call.outputRef.blobId} agentId={agentId} outputRef={call.outputRef} preview={output} />
            </>
          ) : (
            output && (
              <>
                <div class="label">Result</div>
                <pre>{output}</pre>
              </>
            )
          )}
          {call.error && <div class="error-text">Error: {call.error}</div>}
        </details>
      );
    }
    case "todo":
      return (
        <div class="row todo" data-kind="todo">
          <div class="who">Todo {meta}</div>
          <ul class="todos">
            {item.value.entries.map((e) => (
              <li class={e.completed ? "done" : ""}>
                <span aria-hidden="true">{e.completed ? "☑" : "☐"}</span>{" "}
                <span class="sr">{e.completed ? "done: " : "to do: "}</span>
                {e.text}
              </li>
            ))}
          </ul>
        </div>
      );
    case "error":
      return (
        <div class="row err" data-kind="error" role="note">
          <div class="who">
            ⚠ Error{item.value.code ? ` ${item.value.code}` : ""} {meta}
          </div>
          <div class="error-text">{item.value.message}</div>
        </div>
      );
    case "compaction":
      return (
        <details class="row compaction" data-kind="compaction">
          <summary>Context compacted {meta}</summary>
          <Markdown text={item.value.summary} />
        </details>
      );
    case "subagentNotice":
      return (
        <div class="row subagent" data-kind="subagent">
          <div class="who">
            ↳ Sub-agent result{" "}
            <a href={`#/agent/${item.value.childAgentId}`}>{item.value.childAgentId.slice(0, 8)}</a>{" "}
            {meta}
          </div>
          <Markdown text={item.value.text} />
        </div>
      );
    default:
      return (
        <div class="row" data-kind="unknown">
          <div class="who">Unknown item {meta}</div>
        </div>
      );
  }
}
