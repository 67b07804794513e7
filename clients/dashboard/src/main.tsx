// The dashboard's shell: the connection banner, the token prompt, notices and the routes
// (#/ the agents, #/new a new agent, #/agent/ID an agent's page).
import { render, type JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { setToken, token } from "./client";
import { follow, retryNow } from "./events";
import { startPresence } from "./presence";
import { useStore } from "./store";
import { AgentList } from "./views/AgentList";
import { AgentPage } from "./views/AgentPage";
import { CreateAgent } from "./views/CreateAgent";
import "./style.css";

function useRoute(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash;
}

function App(): JSX.Element {
  const store = useStore();
  const route = useRoute();
  const agent = /^#\/agent\/([\w-]+)/.exec(route);
  let page: JSX.Element;
  if (store.connection === "token") page = <TokenPrompt />;
  else if (agent)
    page = (
      <div class="split">
        {/* On a wide screen the agents stay in view beside the one open (hidden on a phone). */}
        <aside class="sidebar" aria-label="Agents">
          <AgentList current={agent[1]} />
        </aside>
        <AgentPage key={agent[1]} id={agent[1]} />
      </div>
    );
  else if (route === "#/new" && !store.readOnly) page = <CreateAgent />;
  else page = <AgentList />;
  return (
    <>
      <Banner />
      {page}
      <Notices />
    </>
  );
}

function Banner(): JSX.Element | null {
  const store = useStore();
  if (store.connection === "live" || store.connection === "token") return null;
  const text = store.connection === "connecting" ? "Connecting…" : "Reconnecting…";
  return (
    <div class="banner" role="status" data-connection={store.connection}>
      ⟳ {text}
      {store.connectionError && <span class="meta"> ({store.connectionError})</span>}
    </div>
  );
}

function Notices(): JSX.Element {
  const store = useStore();
  return (
    <div class="notices" aria-live="polite">
      {store.notices.map((n) => (
        <div class={`notice notice-${n.kind}`} key={n.id}>
          <span>
            {n.kind === "attention" ? "● " : n.kind === "error" ? "✕ " : "ℹ "}
            {n.agentId ? <a href={`#/agent/${n.agentId}`}>{n.text}</a> : n.text}
          </span>
          <button type="button" class="small" aria-label="Dismiss" onClick={() => store.dismiss(n.id)}>
            ×
          </button>
        </div>
      ))}
    </div>
  );
}

function TokenPrompt(): JSX.Element {
  const [value, setValue] = useState("");
  const refused = token() !== "";
  const submit = (e: Event) => {
    e.preventDefault();
    setToken(value.trim());
    retryNow();
  };
  return (
    <main class="page">
      <h1>Token needed</h1>
      <form class="create" onSubmit={submit}>
        <p>
          This daemon asks for a token (one line of its <code>--auth-token-file</code>). It is kept only
          for this tab's session.
        </p>
        {refused && (
          <p class="error-text" role="alert">
            ✕ The daemon refused that token.
          </p>
        )}
        <label for="token">Token</label>
        <input id="token" type="password" autocomplete="off" value={value} onInput={(e) => setValue((e.target as HTMLInputElement).value)} />
        <button type="submit" class="primary">
          Connect
        </button>
      </form>
    </main>
  );
}

render(<App />, document.getElementById("app")!);
void follow();
startPresence();
