// An agent's page: its state and actions, pending permissions, queued prompts, the
// timeline and the prompt box.
import type { JSX } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import { agents as agentApi, describe, subagents, turns } from "../client";
import { agentName, attentionText, cancelText, STATE_SYMBOL, stateOf } from "../format";
import type { Agent, TimelineRow } from "../gen";
import { setFocus } from "../presence";
import { useStore } from "../store";
import { TimelineModel } from "../timeline";
import { Changes } from "./Changes";
import { Permission } from "./Permissions";
import { PromptBox } from "./PromptBox";
import { Runs } from "./Runs";
import { TimelineList } from "./Timeline";

declare global {
  interface Window {
    /** For tests and the curious: the rows the page holds for the open agent. */
    corralTimeline?: TimelineModel;
  }
}

export function AgentPage({ id }: { id: string }): JSX.Element {
  const store = useStore();
  const agent = store.agents.get(id);
  const model = useMemo(() => new TimelineModel(id), [id]);
  const [forkStatus, setForkStatus] = useState("");
  useEffect(() => {
    model.start();
    window.corralTimeline = model;
    setFocus(id);
    return () => {
      model.close();
      setFocus("");
    };
  }, [model]);
  useEffect(() => {
    if (
      agent?.attention?.required &&
      document.visibilityState === "visible" &&
      stateOf(agent) !== "closed" &&
      !store.readOnly
    ) {
      agentApi.clearAttention({ agentIds: [id] }).catch(() => undefined);
    }
  }, [agent?.attention?.required, agent?.attention?.at?.seconds]);

  if (!agent) {
    return (
      <main class="page">
        <p>{store.connection === "live" ? "No agent has this id." : "Loading…"}</p>
        <a href="#/">Back to the agents</a>
      </main>
    );
  }
  const state = stateOf(agent);
  const children = [...store.agents.values()].filter((a) => a.parentAgentId === id);
  // A fork of the rows before a user message: the page opens it once it exists (ForkAgent
  // answers when its session is ready).
  const fork = async (row: TimelineRow) => {
    setForkStatus(`Forking before message #${String(row.seq)}…`);
    try {
      const at = { case: "cursor" as const, value: { epoch: model.epoch, seq: row.seq } };
      const answer = await agentApi.forkAgent({ agentId: id, at });
      setForkStatus("");
      location.hash = `#/agent/${answer.agent?.id ?? ""}`;
    } catch (err) {
      setForkStatus(`Fork failed: ${describe(err)}`);
    }
  };
  return (
    <main class="page agent-page">
      <Header agent={agent} children={children} />
      {!store.readOnly && <Actions agent={agent} />}
      {agent.pendingPermissions.map((p) => (
        <Permission key={p.id} agentId={id} permission={p} readOnly={store.readOnly} />
      ))}
      <Queued agent={agent} readOnly={store.readOnly} />
      <Runs agentId={id} />
      <Changes agentId={id} />
      {forkStatus && (
        <div class="status" role="status" data-testid="fork-status">
          {forkStatus}
        </div>
      )}
      <TimelineList model={model} onFork={store.readOnly ? undefined : fork} />
      {state === "running" && (
        <div class="live" role="status">
          ▶ A turn is running…
        </div>
      )}
      {!store.readOnly && (
        <PromptBox agentId={id} running={state === "running" || state === "initializing"} closed={state === "closed"} />
      )}
    </main>
  );
}

function Header({ agent, children }: { agent: Agent; children: Agent[] }): JSX.Element {
  const state = stateOf(agent);
  const attention = attentionText(agent);
  return (
    <header class="agent-head">
      <a href="#/" class="back" aria-label="Back to the agents">
        ← Agents
      </a>
      <h1>{agentName(agent)}</h1>
      <div class="facts">
        <span class={`state state-${state}`} data-state={state}>
          {STATE_SYMBOL[state]} {state}
        </span>
        {attention && <span class="attention">● {attention}</span>}
        <span>
          {agent.provider}
          {agent.model && ` · ${agent.model}`}
          {agent.mode && ` · ${agent.mode}`}
        </span>
        <span class="meta" title={agent.cwd}>
          {agent.cwd}
        </span>
        {agent.workspace && (
          <span class="meta" data-testid="branch" title={agent.workspace.path}>
            ⎇ {agent.workspace.branch}
          </span>
        )}
        {agent.archivedAt && <span class="meta">archived</span>}
        {agent.parentAgentId && (
          <span>
            parent <a href={`#/agent/${agent.parentAgentId}`}>{agent.parentAgentId.slice(0, 8)}</a>
          </span>
        )}
        {children.length > 0 && (
          <span>
            children:{" "}
            {children.map((c) => (
              <a href={`#/agent/${c.id}`} class="child">
                {agentName(c)}
              </a>
            ))}
          </span>
        )}
      </div>
      {agent.lastError && state === "errored" && (
        <div class="error-text">
          ✕ {agent.lastError.code}: {agent.lastError.message}
        </div>
      )}
    </header>
  );
}

function Actions({ agent }: { agent: Agent }): JSX.Element {
  const [status, setStatus] = useState("");
  const [spawning, setSpawning] = useState(false);
  const [task, setTask] = useState("");
  const state = stateOf(agent);
  const run = async (label: string, call: () => Promise<string>) => {
    setStatus(`${label}…`);
    try {
      setStatus(await call());
    } catch (err) {
      setStatus(`${label} failed: ${describe(err)}`);
    }
  };
  const cancel = () =>
    run("Cancel", async () => cancelText((await turns.cancelTurn({ agentId: agent.id })).outcome));
  const reload = () =>
    run("Reload", async () => (await agentApi.reloadAgent({ agentId: agent.id }), "Reloaded: a new provider session."));
  const close = () =>
    run("Close", async () => (await agentApi.closeAgent({ agentId: agent.id }), "Closed."));
  const archive = () => {
    if (!confirm("Archive this agent and its sub-agents? They are closed too.")) return;
    void run("Archive", async () => {
      const ids = (await agentApi.archiveAgent({ agentId: agent.id })).archivedAgentIds;
      return `Archived ${ids.length} agent${ids.length === 1 ? "" : "s"}.`;
    });
  };
  const spawn = (e: Event) => {
    e.preventDefault();
    if (!task.trim()) return;
    void run("Spawn", async () => {
      const answer = await subagents.spawnSubagent({ requesterAgentId: agent.id, task });
      setTask("");
      setSpawning(false);
      return `Spawned sub-agent ${answer.run?.childAgentId.slice(0, 8) ?? ""}.`;
    });
  };
  const closed = state === "closed";
  return (
    <div class="actions">
      <div class="buttons">
        <button type="button" onClick={cancel} disabled={closed}>
          ■ Cancel turn
        </button>
        <button type="button" onClick={reload} disabled={closed}>
          ↻ Reload
        </button>
        <button type="button" onClick={() => setSpawning(!spawning)} disabled={closed} aria-expanded={spawning}>
          ↳ Sub-agent
        </button>
        <button type="button" onClick={close} disabled={closed}>
          Close
        </button>
        <button type="button" onClick={archive} disabled={!!agent.archivedAt}>
          Archive
        </button>
      </div>
      {spawning && (
        <form class="spawn" onSubmit={spawn}>
          <label for="spawn-task">Task for a sub-agent</label>
          <input id="spawn-task" value={task} onInput={(e) => setTask((e.target as HTMLInputElement).value)} />
          <button type="submit">Spawn</button>
        </form>
      )}
      {status && (
        <div class="status" role="status" data-testid="action-status">
          {status}
        </div>
      )}
    </div>
  );
}

function Queued({ agent, readOnly }: { agent: Agent; readOnly: boolean }): JSX.Element | null {
  const [error, setError] = useState("");
  if (!agent.queuedPrompts.length) return null;
  const remove = async (clientMessageId: string) => {
    try {
      await turns.removeQueuedPrompt({ agentId: agent.id, clientMessageId });
      setError("");
    } catch (err) {
      setError(describe(err));
    }
  };
  return (
    <section class="queued" aria-label="Queued prompts">
      <div class="label">Queued prompts ({agent.queuedPrompts.length})</div>
      <ol>
        {agent.queuedPrompts.map((q) => {
          const text =
            q.content.map((c) => (c.part.case === "text" ? c.part.value : "[image]")).join(" ") +
            (q.clipped ? "…" : "");
          return (
            <li key={q.clientMessageId}>
              <span class="queued-text">{text}</span>{" "}
              {q.queuedBy && q.queuedBy !== "client" && <span class="meta">(queued by {q.queuedBy}) </span>}
              {!readOnly && (
                <button type="button" class="small" onClick={() => remove(q.clientMessageId)} aria-label={`Remove queued prompt: ${text}`}>
                  Remove
                </button>
              )}
            </li>
          );
        })}
      </ol>
      {error && <div class="error-text">{error}</div>}
    </section>
  );
}
