// The agents, live, as a tree of parents and children (archived ones behind a filter).
import type { JSX } from "preact";
import { useState } from "preact/hooks";
import { agentName, attentionText, STATE_SYMBOL, stateOf } from "../format";
import type { Agent } from "../gen";
import { canAskNotifications, askNotifications } from "../presence";
import { useStore } from "../store";
import { Search } from "./Search";

function created(a: Agent): number {
  return a.createdAt ? Number(a.createdAt.seconds) * 1e3 + a.createdAt.nanos / 1e6 : 0;
}

/** The agents; `current` marks the open one (the list beside an agent's page). */
export function AgentList({ current = "" }: { current?: string }): JSX.Element {
  const store = useStore();
  const [archived, setArchived] = useState(false);
  const all = [...store.agents.values()]
    .filter((a) => archived || !a.archivedAt)
    .sort((a, b) => created(a) - created(b));
  const byParent = new Map<string, Agent[]>();
  const shown = new Set(all.map((a) => a.id));
  for (const agent of all) {
    // A child whose parent is hidden (archived) or gone is shown at the top level.
    const parent = agent.parentAgentId && shown.has(agent.parentAgentId) ? agent.parentAgentId : "";
    byParent.set(parent, [...(byParent.get(parent) ?? []), agent]);
  }
  const archivedCount = [...store.agents.values()].filter((a) => a.archivedAt).length;
  return (
    <main class={current ? "list-side" : "page"}>
      <div class="list-head">
        <h1>Agents</h1>
        {store.readOnly ? (
          <span class="meta" data-testid="read-only">
            Read-only token: watching only
          </span>
        ) : (
          <a href="#/new" class="button primary">
            + New agent
          </a>
        )}
      </div>
      {!current && <Search />}
      <div class="filters">
        <label>
          <input type="checkbox" checked={archived} onChange={() => setArchived(!archived)} /> Show archived (
          {archivedCount})
        </label>
        {canAskNotifications() && (
          <button type="button" class="link" onClick={() => askNotifications()}>
            Turn on notifications
          </button>
        )}
      </div>
      {all.length === 0 ? (
        <p class="empty">{store.connection === "live" ? "No agents yet." : "Loading…"}</p>
      ) : (
        <Tree byParent={byParent} parent="" depth={0} current={current} />
      )}
    </main>
  );
}

interface TreeProps {
  byParent: Map<string, Agent[]>;
  parent: string;
  depth: number;
  current: string;
}

function Tree({ byParent, parent, depth, current }: TreeProps): JSX.Element {
  const agents = byParent.get(parent) ?? [];
  return (
    <ul class={depth ? "tree children" : "tree"} role={depth ? "group" : "list"}>
      {agents.map((agent) => (
        <li key={agent.id}>
          <AgentItem agent={agent} current={agent.id === current} />
          {byParent.has(agent.id) && (
            <Tree byParent={byParent} parent={agent.id} depth={depth + 1} current={current} />
          )}
        </li>
      ))}
    </ul>
  );
}

function AgentItem({ agent, current }: { agent: Agent; current: boolean }): JSX.Element {
  const state = stateOf(agent);
  const attention = attentionText(agent);
  const permissions = agent.pendingPermissions.length;
  const queued = agent.queuedPrompts.length;
  return (
    <a
      href={`#/agent/${agent.id}`}
      class={`agent-item${attention ? " wants" : ""}`}
      data-agent-id={agent.id}
      aria-current={current ? "page" : undefined}
    >
      <div class="line1">
        <span class={`state state-${state}`} data-state={state}>
          {STATE_SYMBOL[state]} {state}
        </span>
        <span class="title">{agentName(agent)}</span>
        {attention && <span class="attention">● {attention}</span>}
      </div>
      <div class="line2">
        <span>
          {agent.provider}
          {agent.model && ` · ${agent.model}`}
        </span>
        {permissions > 0 && (
          <span class="badge">
            ? {permissions} permission{permissions === 1 ? "" : "s"}
          </span>
        )}
        {queued > 0 && <span class="badge">≡ {queued} queued</span>}
        {agent.archivedAt && <span class="badge">archived</span>}
        <span class="meta">{agent.id.slice(0, 8)}</span>
      </div>
    </a>
  );
}
