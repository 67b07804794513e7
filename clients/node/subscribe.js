#!/usr/bin/env node
// Subscribe to a corral daemon's events and print one JSON line per Event on stdout.
//
//   node subscribe.js ADDR [--agent ID ...] [--resume-revision N] [--max-events N]
//                          [--until-synced-then N]
//
// Prints `READY` on stderr once the call is started. Exits 0 after --max-events events, after
// N events following `synced` (--until-synced-then), when the stream ends, or on SIGINT/SIGTERM;
// exits 1 when the call fails (the status goes to stderr) and 2 on bad arguments. When the reader
// of stdout goes away (`node subscribe.js ADDR | head`) it ends quietly with 141, the status a
// shell reports for a program a closed pipe stopped (as the corral CLI does).
'use strict';

const { loadCorral } = require('./corral');

const USAGE =
  'usage: node subscribe.js ADDR [--agent ID ...] [--resume-revision N] [--max-events N] ' +
  '[--until-synced-then N]';

function usageError(message) {
  process.stderr.write(`${message}\n${USAGE}\n`);
  process.exit(2);
}

function count(flag, value) {
  if (value === undefined || !/^\d+$/.test(value)) usageError(`${flag} needs a number`);
  return value;
}

function parseArgs(argv) {
  const options = { address: null, agentIds: [], resumeRevision: null, maxEvents: null, syncedThen: null };
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (arg === '--agent') {
      const id = argv[(i += 1)];
      if (!id) usageError('--agent needs an id');
      options.agentIds.push(id);
    } else if (arg === '--resume-revision') {
      options.resumeRevision = count(arg, argv[(i += 1)]);
    } else if (arg === '--max-events') {
      options.maxEvents = Number(count(arg, argv[(i += 1)]));
    } else if (arg === '--until-synced-then') {
      options.syncedThen = Number(count(arg, argv[(i += 1)]));
    } else if (arg === '-h' || arg === '--help') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else if (arg.startsWith('-') || options.address !== null) {
      usageError(`unexpected argument: ${arg}`);
    } else {
      options.address = arg;
    }
  }
  if (options.address === null) usageError('missing ADDR');
  return options;
}

function main() {
  const options = parseArgs(process.argv.slice(2));
  const corral = loadCorral();
  const client = new corral.EventService(options.address, corral.insecure);
  const request = { agent_ids: options.agentIds };
  if (options.resumeRevision !== null) request.resume_revision = options.resumeRevision;

  let printed = 0;
  let afterSynced = null; // events printed since `synced`, once it has been seen
  let finished = false;

  const call = client.Subscribe(request);
  process.stdout.on('error', (error) => {
    if (error.code !== 'EPIPE') throw error;
    finish(141); // nobody reads any more: stop the call, say nothing
  });
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => finish(0));
  process.stderr.write('READY\n');

  function finish(code) {
    if (finished) return;
    finished = true;
    process.exitCode = code;
    call.cancel();
    client.close();
  }

  function done() {
    if (options.maxEvents !== null && printed >= options.maxEvents) return true;
    return options.syncedThen !== null && afterSynced !== null && afterSynced >= options.syncedThen;
  }

  call.on('data', (response) => {
    for (const event of response.events) {
      if (finished || done()) break;
      process.stdout.write(`${JSON.stringify(event)}\n`);
      printed += 1;
      if (afterSynced !== null) afterSynced += 1;
      if (event.payload === 'synced') afterSynced = 0;
    }
    if (done()) finish(0);
  });
  call.on('error', (error) => {
    if (finished) return; // our own cancel
    process.stderr.write(`Subscribe failed: ${corral.statusName(error.code)}: ${error.details}\n`);
    finish(1);
  });
  call.on('end', () => finish(0));

  if (done()) finish(0); // --max-events 0
}

main();
