// One Connect transport to the daemon that served this page, and a client per service.
// The bearer token (when the daemon asks for one) lives in sessionStorage only: it is gone
// when the tab closes.
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import {
  AgentService,
  EventService,
  ServerService,
  SubagentService,
  TimelineService,
  TurnService,
  WorkspaceService,
} from "./gen";

const TOKEN_KEY = "corral.token";

export function token(): string {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? "";
  } catch {
    return "";
  }
}

export function setToken(value: string): void {
  try {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage refused (private mode): the token is not kept.
  }
}

const withToken: Interceptor = (next) => async (req) => {
  const value = token();
  if (value) req.header.set("Authorization", `Bearer ${value}`);
  return next(req);
};

const transport = createConnectTransport({
  baseUrl: location.origin,
  useBinaryFormat: true,
  interceptors: [withToken],
});

export const agents = createClient(AgentService, transport);
export const events = createClient(EventService, transport);
export const timeline = createClient(TimelineService, transport);
export const turns = createClient(TurnService, transport);
export const subagents = createClient(SubagentService, transport);
export const workspaces = createClient(WorkspaceService, transport);
export const server = createClient(ServerService, transport);

export function isUnauthenticated(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Unauthenticated;
}

export function isAbort(err: unknown): boolean {
  return err instanceof ConnectError && err.code === Code.Canceled;
}

/** A short human text for a failed call: the status name and the daemon's message. */
export function describe(err: unknown): string {
  if (err instanceof ConnectError) {
    const name = Code[err.code] ?? String(err.code);
    return `${name}: ${err.rawMessage}`;
  }
  return err instanceof Error ? err.message : String(err);
}

/** A random id (hex) for request ids, client message ids and this tab's client id. */
export function randomId(bytes = 16): string {
  const buf = new Uint8Array(bytes);
  crypto.getRandomValues(buf);
  return Array.from(buf, (b) => b.toString(16).padStart(2, "0")).join("");
}
