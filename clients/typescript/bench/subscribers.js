#!/usr/bin/env node
// The Node side of bench/web_stream.py: N subscribers of one agent's events, each on its own
// connection, through the gRPC transport (HTTP/2, the gRPC port) or the Connect transport
// (HTTP/1.1, binary, the web port). Every message is decoded, as a real client would.
//
//   node bench/subscribers.js URL grpc|connect N AGENT live|replay
//
// live    all N synced, prints `ready`; then each reads until the agent's next turn_completed;
//         prints the events they received in all (after `synced`) once every one is done
// replay  each resumes from revision 0 and reads until `synced`; prints
//         `<events> <seconds> <cpu seconds>`: the replayed events in all, the time from the
//         first request to the last `synced`, and this process's CPU time over it
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";

import { EventService } from "../src/gen/index.js";

const [url, transportName, count, agentId, mode] = process.argv.slice(2);
if (!["grpc", "connect"].includes(transportName) || !/^\d+$/.test(count ?? "") ||
    !agentId || !["live", "replay"].includes(mode)) {
  process.stderr.write("usage: node bench/subscribers.js URL grpc|connect N AGENT live|replay\n");
  process.exit(2);
}

function transport() {
  if (transportName === "grpc") return createGrpcTransport({ baseUrl: url });
  return createConnectTransport({ baseUrl: url, httpVersion: "1.1", useBinaryFormat: true });
}

const abort = new AbortController();

// Reads one subscription: resolves `synced` when it has seen `synced` (with the events before
// it), and returns the events after it up to the first turn_completed.
function subscriber(request, onSynced) {
  const client = createClient(EventService, transport());
  return (async () => {
    let before = 0;
    let after = -1;
    for await (const response of client.subscribe(request, { signal: abort.signal })) {
      for (const event of response.events) {
        if (after < 0) {
          if (event.payload.case === "synced") {
            after = 0;
            onSynced(before);
            if (mode === "replay") return before;
          } else before += 1;
        } else {
          after += 1;
          if (event.payload.case === "turnCompleted") return after;
        }
      }
    }
    throw new Error("the stream ended early");
  })();
}

async function main() {
  const n = Number(count);
  const started = performance.now();
  const cpu = process.cpuUsage();
  let synced = 0;
  let ready;
  const allSynced = new Promise((resolve) => (ready = resolve));
  const onSynced = () => (++synced === n ? ready() : undefined);
  const request = mode === "replay" ? { agentIds: [agentId], resumeRevision: 0n } : { agentIds: [agentId] };
  const runs = Array.from({ length: n }, () => subscriber(request, onSynced));
  if (mode === "live") {
    await allSynced;
    process.stdout.write("ready\n");
    const counts = await Promise.all(runs);
    process.stdout.write(`${counts.reduce((a, b) => a + b, 0)}\n`);
  } else {
    const counts = await Promise.all(runs);
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    const cpuSeconds = (used.user + used.system) / 1e6;
    process.stdout.write(`${counts.reduce((a, b) => a + b, 0)} ${seconds} ${cpuSeconds}\n`);
  }
}

try {
  await main();
} finally {
  abort.abort();
}
