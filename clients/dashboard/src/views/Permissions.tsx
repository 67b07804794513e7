// Pending permissions, answered with the provider's own options and an optional note.
import type { JSX } from "preact";
import { useState } from "preact/hooks";
import { describe, turns } from "../client";
import { json } from "../format";
import { PermissionBehavior, type PendingPermission, type PermissionAction } from "../gen";

function behaviorOf(action: Pick<PermissionAction, "id" | "kind">): PermissionBehavior {
  return /reject|deny|decline|cancel|abort/i.test(`${action.kind} ${action.id}`)
    ? PermissionBehavior.DENY
    : PermissionBehavior.ALLOW;
}

export function Permission({
  agentId,
  permission,
  readOnly = false,
}: {
  agentId: string;
  permission: PendingPermission;
  /** A read-only token sees the request, not the means to answer it. */
  readOnly?: boolean;
}): JSX.Element {
  const [note, setNote] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState("");
  const answer = async (behavior: PermissionBehavior, actionId: string) => {
    setBusy(true);
    setError("");
    try {
      await turns.respondToPermission({
        agentId,
        requestId: permission.id,
        behavior,
        selectedActionId: actionId,
        message: note,
      });
    } catch (err) {
      setError(describe(err));
      setBusy(false);
    }
  };
  const actions: Array<Pick<PermissionAction, "id" | "label" | "kind">> = permission.actions.length
    ? permission.actions
    : [
        { id: "", label: "Allow", kind: "allow" },
        { id: "", label: "Deny", kind: "deny" },
      ];
  const [full, setFull] = useState<PendingPermission | null>(null);
  const shown = full ?? permission;
  const input = shown.input ? json(shown.input) : "";
  const showAll = async () => {
    try {
      const answer = await turns.getPendingPermission({ agentId, requestId: permission.id });
      setFull(answer.permission ?? null);
    } catch (err) {
      setError(describe(err));
    }
  };
  const noteId = `note-${permission.id}`;
  return (
    <section class="permission" aria-label={`Permission: ${permission.title || permission.name}`}>
      <div class="permission-title">
        <span aria-hidden="true">?</span> Permission asked:{" "}
        <strong>{permission.title || permission.name}</strong>
        {permission.kind && <span class="meta"> ({permission.kind})</span>}
      </div>
      {input && input !== "{}" && <pre>{input}</pre>}
      {shown.inputClipped && (
        <button type="button" class="link" onClick={showAll}>
          The input is clipped ({String(shown.inputBytes)} bytes): show all
        </button>
      )}
      {readOnly ? (
        <div class="meta">Waiting for an answer (this token may only watch).</div>
      ) : (
        <Answer noteId={noteId} note={note} setNote={setNote} />
      )}
      {!readOnly && (
        <div class="buttons">
          {actions.map((action) => {
            const behavior = behaviorOf(action);
            return (
              <button
                type="button"
                disabled={busy}
                class={behavior === PermissionBehavior.DENY ? "deny" : "allow"}
                onClick={() => answer(behavior, action.id)}
              >
                {behavior === PermissionBehavior.DENY ? "✕ " : "✓ "}
                {action.label || action.id}
              </button>
            );
          })}
        </div>
      )}
      {error && (
        <div class="error-text" role="alert">
          {error}
        </div>
      )}
    </section>
  );
}

function Answer({ noteId, note, setNote }: { noteId: string; note: string; setNote: (v: string) => void }): JSX.Element {
  return (
    <>
      <label for={noteId} class="label">
        Note to the agent (optional)
      </label>
      <input id={noteId} type="text" value={note} onInput={(e) => setNote((e.target as HTMLInputElement).value)} />
    </>
  );
}
