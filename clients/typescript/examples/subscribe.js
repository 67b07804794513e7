#!/usr/bin/env node
// Follow a corral daemon's events through the generated stubs and @connectrpc/connect-node,
// printing each Event as the base64 of its binary encoding, one per line (a test decodes them
// into corral.v1 messages and compares them with what another client received).
//
//   node examples/subscribe.js URL [--transport grpc|connect] [--json] [--agent ID ...]
//                              [--resume-revision N] [--resume-incarnation S] [--max-events N]
//                              [--until-stdin-ends] [--fetch-timeline AGENT]
//
// --fetch-timeline first prints that agent's FetchTimeline page (TAIL, 50 rows) as one line,
// `page:` and the base64 of the FetchTimelineResponse, then subscribes.
//
// URL is http://HOST:PORT: the gRPC port with `--transport grpc` (the default; HTTP/2), the web
// port with `--transport connect` (the Connect protocol over HTTP/1.1, binary messages, or JSON
// with --json). Exits 0 after --max-events events, when the server ends the stream, on
// SIGINT/SIGTERM, or with --until-stdin-ends when its standard input ends (a parent that dies
// takes its subscriber with it); 1 when the call fails (`Subscribe failed: CODE: message` on stderr); 2 on bad
// arguments.
import { toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";

import {
  EventSchema,
  EventService,
  FetchTimelineResponseSchema,
  TimelineDirection,
  TimelineService,
} from "../src/gen/index.js";

const USAGE =
  "usage: node examples/subscribe.js URL [--transport grpc|connect] [--json] [--agent ID ...] " +
  "[--resume-revision N] [--resume-incarnation S] [--max-events N] [--until-stdin-ends] " +
  "[--fetch-timeline AGENT]";

function usageError(message) {
  process.stderr.write(`${message}\n${USAGE}\n`);
  process.exit(2);
}

function number(flag, value) {
  if (value === undefined || !/^\d+$/.test(value)) usageError(`${flag} needs a number`);
  return BigInt(value);
}

function parseArgs(argv) {
  const options = {
    url: null,
    transport: "grpc",
    json: false,
    request: { agentIds: [] },
    maxEvents: null,
    untilStdinEnds: false,
    pageOf: null,
  };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === "--transport") {
      options.transport = argv[(i += 1)];
      if (options.transport !== "grpc" && options.transport !== "connect") usageError("--transport is grpc or connect");
    } else if (arg === "--json") {
      options.json = true;
    } else if (arg === "--agent") {
      const id = argv[(i += 1)];
      if (!id) usageError("--agent needs an id");
      options.request.agentIds.push(id);
    } else if (arg === "--resume-revision") {
      options.request.resumeRevision = number(arg, argv[(i += 1)]);
    } else if (arg === "--resume-incarnation") {
      options.request.resumeIncarnation = argv[(i += 1)] ?? usageError("--resume-incarnation needs a value");
    } else if (arg === "--max-events") {
      options.maxEvents = Number(number(arg, argv[(i += 1)]));
    } else if (arg === "--fetch-timeline") {
      options.pageOf = argv[(i += 1)] || usageError("--fetch-timeline needs an agent id");
    } else if (arg === "--until-stdin-ends") {
      options.untilStdinEnds = true;
    } else if (arg.startsWith("-") || options.url !== null) {
      usageError(`unexpected argument: ${arg}`);
    } else {
      options.url = arg;
    }
  }
  if (options.url === null) usageError("missing URL");
  if (options.json && options.transport !== "connect") usageError("--json needs --transport connect");
  return options;
}

function transportOf(options) {
  if (options.transport === "grpc") return createGrpcTransport({ baseUrl: options.url });
  return createConnectTransport({ baseUrl: options.url, httpVersion: "1.1", useBinaryFormat: !options.json });
}

// The agent's newest 50 rows: `page:` and the FetchTimelineResponse's base64. False if it failed.
async function printPage(transport, agentId) {
  try {
    const page = await createClient(TimelineService, transport).fetchTimeline({
      agentId,
      direction: TimelineDirection.TAIL,
      limit: 50,
    });
    process.stdout.write(`page:${Buffer.from(toBinary(FetchTimelineResponseSchema, page)).toString("base64")}\n`);
    return true;
  } catch (error) {
    const failure = ConnectError.from(error);
    process.stderr.write(`FetchTimeline failed: ${Code[failure.code]}: ${failure.rawMessage}\n`);
    process.exitCode = 1;
    return false;
  }
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const transport = transportOf(options);
  if (options.pageOf !== null && !(await printPage(transport, options.pageOf))) return;
  const client = createClient(EventService, transport);
  const abort = new AbortController();
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => abort.abort());
  if (options.untilStdinEnds) {
    process.stdin.on("end", () => abort.abort()).on("close", () => abort.abort()).resume();
  }
  let printed = 0;
  try {
    for await (const response of client.subscribe(options.request, { signal: abort.signal })) {
      for (const event of response.events) {
        if (options.maxEvents !== null && printed >= options.maxEvents) break;
        process.stdout.write(`${Buffer.from(toBinary(EventSchema, event)).toString("base64")}\n`);
        printed += 1;
      }
      if (options.maxEvents !== null && printed >= options.maxEvents) abort.abort();
    }
  } catch (error) {
    // Our own abort ends the call as Canceled: that is a clean exit.
    const failure = ConnectError.from(error);
    if (!(abort.signal.aborted && failure.code === Code.Canceled)) {
      process.stderr.write(`Subscribe failed: ${Code[failure.code]}: ${failure.rawMessage}\n`);
      process.exitCode = 1;
    }
  }
  if (options.untilStdinEnds) process.stdin.destroy();
}

await main();
