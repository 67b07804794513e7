// The search box over every agent's timeline (TimelineService.SearchTimeline): hits best first,
// each with its agent, the kind of row, when, and the snippet with its matches marked.
import type { JSX } from "preact";
import { useState } from "preact/hooks";
import { describe, timeline } from "../client";
import { agentName, time } from "../format";
import type { SearchHit } from "../gen";
import { useStore } from "../store";

const PAGE = 20;

/** The snippet's text with each match between « and » as a <mark>: text nodes only, never
 * markup from the agent's words. */
function Snippet({ text }: { text: string }): JSX.Element {
  const parts: (string | JSX.Element)[] = [];
  let rest = text;
  for (let i = 0; rest && i < 1000; i++) {
    const open = rest.indexOf("«");
    const close = open < 0 ? -1 : rest.indexOf("»", open);
    if (close < 0) break;
    if (open > 0) parts.push(rest.slice(0, open));
    parts.push(<mark key={i}>{rest.slice(open + 1, close)}</mark>);
    rest = rest.slice(close + 1);
  }
  if (rest) parts.push(rest);
  return <span class="snippet">{parts}</span>;
}

export function Search(): JSX.Element {
  const store = useStore();
  const [query, setQuery] = useState("");
  const [hits, setHits] = useState<SearchHit[] | null>(null);
  const [status, setStatus] = useState("");
  const submit = async (e: Event) => {
    e.preventDefault();
    if (!query.trim()) return;
    setStatus("Searching…");
    try {
      const answer = await timeline.searchTimeline({ query, pageSize: PAGE });
      setHits(answer.hits);
      setStatus(answer.indexing ? "Older rows are still being indexed: some hits may be missing." : "");
    } catch (err) {
      setHits(null);
      setStatus(describe(err));
    }
  };
  return (
    <section class="search" aria-label="Search">
      <form class="search-form" role="search" onSubmit={submit}>
        <label for="search" class="sr">
          Search every timeline
        </label>
        <input
          id="search"
          type="search"
          value={query}
          placeholder={'Search every timeline: words, "a phrase", pref*, AND / OR / NOT'}
          onInput={(e) => setQuery((e.target as HTMLInputElement).value)}
        />
        <button type="submit">Search</button>
      </form>
      {status && (
        <div class="status" role="status" data-testid="search-status">
          {status}
        </div>
      )}
      {hits && hits.length === 0 && <p class="empty">No hits.</p>}
      {hits && hits.length > 0 && (
        <ol class="search-hits">
          {hits.map((hit) => {
            const agent = store.agents.get(hit.agentId);
            return (
              <li key={`${hit.agentId}-${hit.cursor?.epoch}-${hit.cursor?.seq}`}>
                <a href={`#/agent/${hit.agentId}`} class="search-hit" data-agent-id={hit.agentId}>
                  <div class="line1">
                    <span class="title">{agent ? agentName(agent) : hit.agentId.slice(0, 8)}</span>
                    <span class="meta">
                      #{String(hit.cursor?.seq ?? 0n)} {hit.itemKind} · {time(hit.timestamp)}
                    </span>
                  </div>
                  <Snippet text={hit.snippet} />
                </a>
              </li>
            );
          })}
        </ol>
      )}
    </section>
  );
}
