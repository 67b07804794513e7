// What the agent changed in its workspace (WorkspaceService.GetChanges): the changed files,
// and a file's unified diff on demand. It reloads after each turn (the `changes_updated`
// event) and when opened.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { describe, workspaces } from "../client";
import { onChanges } from "../events";
import { ChangeKind, type GetChangesResponse } from "../gen";

const LETTER: Record<number, string> = {
  [ChangeKind.ADDED]: "A",
  [ChangeKind.MODIFIED]: "M",
  [ChangeKind.DELETED]: "D",
  [ChangeKind.RENAMED]: "R",
};

export function Changes({ agentId }: { agentId: string }): JSX.Element {
  const [open, setOpen] = useState(false);
  const [answer, setAnswer] = useState<GetChangesResponse | null>(null);
  const [error, setError] = useState("");
  const [shown, setShown] = useState("");
  const [diff, setDiff] = useState<{ text: string; clipped: boolean } | null>(null);
  const [version, setVersion] = useState(0);

  useEffect(() => onChanges(agentId, () => setVersion((v) => v + 1)), [agentId]);
  useEffect(() => {
    if (!open) return;
    let live = true;
    workspaces
      .getChanges({ agentId, pageSize: 1000 })
      .then((reply) => live && (setAnswer(reply), setError("")))
      .catch((err) => live && setError(describe(err)));
    return () => {
      live = false;
    };
  }, [open, agentId, version]);
  useEffect(() => {
    if (!open || !shown) return;
    let live = true;
    workspaces
      .getChanges({ agentId, diffPaths: [shown], pageSize: 1 })
      .then((reply) => {
        const d = reply.diffs[0];
        if (live) setDiff(d ? { text: d.diff, clipped: d.clipped } : null);
      })
      .catch((err) => live && setError(describe(err)));
    return () => {
      live = false;
    };
  }, [open, shown, agentId, version]);

  const count = answer ? `${answer.totalFiles} · +${answer.linesAdded} −${answer.linesRemoved}` : "";
  return (
    <details class="changes" open={open} onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
      <summary>
        Changes <span class="meta" data-testid="changes-count">{count}</span>
      </summary>
      {error && <p class="meta">{error}</p>}
      {answer && answer.totalFiles === 0 && <p class="meta">No changes.</p>}
      {answer && (
        <ul class="changed-files">
          {answer.files.map((f) => (
            <li key={f.path}>
              <button
                type="button"
                class={f.path === shown ? "file shown" : "file"}
                data-path={f.path}
                onClick={() => setShown(f.path === shown ? "" : f.path)}
              >
                <span class={`kind kind-${LETTER[f.kind] ?? "?"}`}>{LETTER[f.kind] ?? "?"}</span>{" "}
                <span class="counts">{f.binary ? "bin" : `+${f.linesAdded} −${f.linesRemoved}`}</span>{" "}
                {f.oldPath ? `${f.oldPath} → ${f.path}` : f.path}
              </button>
            </li>
          ))}
        </ul>
      )}
      {shown && diff && <DiffText text={diff.text} clipped={diff.clipped} />}
    </details>
  );
}

function DiffText({ text, clipped }: { text: string; clipped: boolean }): JSX.Element {
  const lines = text.replace(/\n$/, "").split("\n");
  return (
    <pre class="diff" data-testid="diff">
      {lines.map((line, i) => (
        <span key={i} class={lineClass(line)}>
          {line}
          {"\n"}
        </span>
      ))}
      {clipped && <span class="meta">… (cut: the diff is longer than the daemon sends at once)</span>}
    </pre>
  );
}

function lineClass(line: string): string {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ")) return "diff-head";
  if (line.startsWith("@@")) return "diff-hunk";
  if (line.startsWith("+")) return "diff-add";
  if (line.startsWith("-")) return "diff-del";
  return "";
}
