// Presence and notifications. The page sends Heartbeat (this tab's client id, whether it is
// visible, the agent it shows, the last time the person did something) so the daemon's
// notification plan knows who is watching; an attention the plan routes in-app to this
// client is shown with the Notification API when allowed, in the page otherwise.
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { events as eventApi, isUnauthenticated, randomId } from "./client";
import { onAttention, reconnect } from "./events";
import { agentName, attentionText } from "./format";
import { NotificationKind } from "./gen";
import { store } from "./store";

const BEAT_MS = 30_000;
let focused = "";
let lastActivity = Date.now();
let timer: ReturnType<typeof setTimeout> | undefined;

export const clientId: string = (() => {
  try {
    const kept = sessionStorage.getItem("corral.client-id");
    if (kept) return kept;
    const id = `web-${randomId(8)}`;
    sessionStorage.setItem("corral.client-id", id);
    return id;
  } catch {
    return `web-${randomId(8)}`;
  }
})();

export function setFocus(agentId: string): void {
  focused = agentId;
  beat();
}

let soon: ReturnType<typeof setTimeout> | undefined;

/** A heartbeat shortly: changes that come together (a page opening) make one call, and it
 * stays out of the way of the page's first loads. */
function beat(): void {
  if (soon === undefined) soon = setTimeout(send, 300);
}

function send(): void {
  soon = undefined;
  clearTimeout(timer);
  timer = setTimeout(send, BEAT_MS);
  if (store.connection === "token") return;
  eventApi
    .heartbeat({
      clientId,
      clientType: "web",
      focusedAgentId: focused,
      appVisible: document.visibilityState === "visible",
      lastActivityAt: timestampFromMs(lastActivity),
    })
    .catch((err) => {
      // The daemon cannot be reached although the stream looks open: it may have stalled.
      if (!isUnauthenticated(err)) reconnect();
    });
}

export function startPresence(): void {
  document.addEventListener("visibilitychange", beat);
  watchForSleep();
  let noted = 0;
  const active = () => {
    lastActivity = Date.now();
    // At most one extra heartbeat a minute for activity alone.
    if (lastActivity - noted > 60_000) {
      noted = lastActivity;
      beat();
    }
  };
  for (const type of ["pointerdown", "keydown"]) document.addEventListener(type, active, { passive: true });
  onAttention((ev) => {
    if (ev.payload.case !== "attentionRequired") return;
    const { agentId, notification } = ev.payload.value;
    if (notification?.kind !== NotificationKind.IN_APP || notification.clientId !== clientId) return;
    const agent = store.agents.get(agentId);
    const text = agent ? `${agentName(agent)}: ${attentionText(agent) || "needs attention"}` : "An agent needs attention";
    show(text, agentId);
  });
  beat();
}

/** A stream can die without a word while the machine sleeps (a laptop lid) or the tab is
 * frozen in the background: after either, and when the browser says it is back online, the
 * page resumes it (exactly: from its revision). A clock that jumped says the machine slept. */
function watchForSleep(): void {
  const TICK_MS = 5_000;
  let last = Date.now();
  let hiddenAt = 0;
  setInterval(() => {
    const now = Date.now();
    // Hidden tabs have their timers slowed on purpose: only a visible one counts.
    if (document.visibilityState === "visible" && now - last > 3 * TICK_MS) reconnect();
    last = now;
  }, TICK_MS);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") hiddenAt = Date.now();
    else if (hiddenAt && Date.now() - hiddenAt > 20_000) reconnect();
  });
  addEventListener("online", reconnect);
  addEventListener("pageshow", (e) => {
    if (e.persisted) reconnect();
  });
}

function show(text: string, agentId: string): void {
  if ("Notification" in window && Notification.permission === "granted" && document.visibilityState !== "visible") {
    const n = new Notification("corral", { body: text, tag: agentId });
    n.onclick = () => {
      window.focus();
      location.hash = `#/agent/${agentId}`;
    };
    return;
  }
  store.notify(text, "attention", agentId);
}

export function canAskNotifications(): boolean {
  return "Notification" in window && Notification.permission === "default";
}

export async function askNotifications(): Promise<void> {
  if ("Notification" in window) await Notification.requestPermission();
  store.changed();
}
