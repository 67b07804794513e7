// The README's example: create an agent, send it a prompt, print the turn as it streams.
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService, TurnService } from "@corral/client";

const transport = createGrpcTransport({ baseUrl: process.argv[2] ?? "http://127.0.0.1:50051" });
const { agent } = await createClient(AgentService, transport).createAgent({ provider: "scripted", cwd: process.cwd() });
const content = [{ part: { case: "text" as const, value: "hello" } }];
for await (const { event } of createClient(TurnService, transport).streamTurn({ agentId: agent!.id, content })) {
  console.log(event.case, event.case === "row" ? event.value.item?.kind.case : "");
}
