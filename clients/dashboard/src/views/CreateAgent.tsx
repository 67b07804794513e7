// Create an agent: a provider from ListProviders (with its modes and models), a working
// directory, a title and an initial prompt.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";
import { agents as agentApi, describe, randomId } from "../client";
import type { Provider } from "../gen";

const CWD_KEY = "corral.last-cwd";

export function CreateAgent(): JSX.Element {
  const [providers, setProviders] = useState<Provider[]>([]);
  const [provider, setProvider] = useState("");
  const [mode, setMode] = useState("");
  const [model, setModel] = useState("");
  const [cwd, setCwd] = useState(() => localStorage.getItem(CWD_KEY) ?? "");
  const [title, setTitle] = useState("");
  const [prompt, setPrompt] = useState("");
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const [requestId] = useState(() => randomId());

  useEffect(() => {
    agentApi
      .listProviders({})
      .then((answer) => {
        setProviders(answer.providers);
        const first = answer.providers.find((p) => p.available);
        if (first) setProvider(first.name);
      })
      .catch((err) => setError(describe(err)));
  }, []);
  const chosen = providers.find((p) => p.name === provider);

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      const answer = await agentApi.createAgent({
        provider,
        cwd,
        mode,
        model,
        title,
        requestId,
        initialPrompt: prompt.trim() ? [{ part: { case: "text", value: prompt } }] : [],
      });
      localStorage.setItem(CWD_KEY, cwd);
      location.hash = `#/agent/${answer.agent?.id ?? ""}`;
    } catch (err) {
      setError(describe(err));
      setBusy(false);
    }
  };

  return (
    <main class="page">
      <a href="#/" class="back">
        ← Agents
      </a>
      <h1>New agent</h1>
      <form class="create" onSubmit={submit}>
        <label for="provider">Provider</label>
        <select
          id="provider"
          value={provider}
          onChange={(e) => {
            setProvider((e.target as HTMLSelectElement).value);
            setMode("");
            setModel("");
          }}
        >
          {providers.map((p) => (
            <option value={p.name} disabled={!p.available}>
              {p.name} ({p.kind}){p.available ? "" : ` — unavailable: ${p.unavailableReason}`}
            </option>
          ))}
        </select>
        {chosen && chosen.modes.length > 0 && (
          <>
            <label for="mode">Mode</label>
            <select id="mode" value={mode} onChange={(e) => setMode((e.target as HTMLSelectElement).value)}>
              <option value="">(the provider's default)</option>
              {chosen.modes.map((m) => (
                <option value={m.id} title={m.description}>
                  {m.label || m.id}
                </option>
              ))}
            </select>
          </>
        )}
        {chosen && chosen.models.length > 0 && (
          <>
            <label for="model">Model</label>
            <select id="model" value={model} onChange={(e) => setModel((e.target as HTMLSelectElement).value)}>
              <option value="">(the provider's default)</option>
              {chosen.models.map((m) => (
                <option value={m.id}>{m.label || m.id}</option>
              ))}
            </select>
          </>
        )}
        <label for="cwd">Working directory</label>
        <input id="cwd" required value={cwd} placeholder="/path/to/project" onInput={(e) => setCwd((e.target as HTMLInputElement).value)} />
        <label for="title">Title (optional)</label>
        <input id="title" value={title} onInput={(e) => setTitle((e.target as HTMLInputElement).value)} />
        <label for="initial">Initial prompt (optional)</label>
        <textarea id="initial" rows={4} value={prompt} onInput={(e) => setPrompt((e.target as HTMLTextAreaElement).value)} />
        <button type="submit" class="primary" disabled={busy || !provider}>
          Create
        </button>
        {error && (
          <div class="error-text" role="alert">
            {error}
          </div>
        )}
      </form>
    </main>
  );
}
