// Load corral.v1 from ../../proto at run time (no codegen step) and expose its service clients.
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');
const PROTO_FILES = [
  'corral/v1/agent_service.proto',
  'corral/v1/turn_service.proto',
  'corral/v1/timeline_service.proto',
  'corral/v1/event_service.proto',
];

// Stable output: field names as in the .proto, 64-bit numbers and enums as strings, every
// field present, and each oneof's chosen member named by a virtual field (e.g. `payload`).
const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

function loadCorral() {
  const definition = protoLoader.loadSync(PROTO_FILES, LOADER_OPTIONS);
  const v1 = grpc.loadPackageDefinition(definition).corral.v1;
  return {
    AgentService: v1.AgentService,
    TurnService: v1.TurnService,
    TimelineService: v1.TimelineService,
    EventService: v1.EventService,
    insecure: grpc.credentials.createInsecure(),
    statusName: (code) => grpc.status[code] ?? String(code),
  };
}

module.exports = { loadCorral, PROTO_ROOT, LOADER_OPTIONS };
