// Follows a corral daemon's events through Java stubs generated from proto/ (protoc's Java
// generator and grpc-java's plugin: package com.corral.v1, one class per message), printing
// each Event as the base64 of its binary encoding, one per line (a test decodes them into
// corral.v1 messages and compares them with what another client received).
//
//   clients/java/run ADDR [--agent ID ...] [--resume-revision N] [--resume-incarnation S]
//                         [--max-events N] [--until-stdin-ends] [--fetch-timeline AGENT]
//
// --fetch-timeline first prints that agent's FetchTimeline page (TAIL, 50 rows) as one line,
// `page:` and the base64 of the FetchTimelineResponse, then subscribes.
//
// ADDR is HOST:PORT of the gRPC port (plaintext). Exits 0 after --max-events events, when the
// server ends the stream, or with --until-stdin-ends when its standard input ends (a parent
// that dies takes its subscriber with it); 1 when the call fails (`Subscribe failed: CODE:
// message` on stderr); 2 on bad arguments.

import com.corral.v1.Event;
import com.corral.v1.EventServiceGrpc;
import com.corral.v1.FetchTimelineRequest;
import com.corral.v1.SubscribeRequest;
import com.corral.v1.SubscribeResponse;
import com.corral.v1.TimelineDirection;
import com.corral.v1.TimelineServiceGrpc;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Iterator;

public final class Subscribe {
  private static final String USAGE =
      "usage: clients/java/run ADDR [--agent ID ...] [--resume-revision N] "
          + "[--resume-incarnation S] [--max-events N] [--until-stdin-ends] [--fetch-timeline AGENT]";

  private Subscribe() {}

  public static void main(String[] args) throws IOException {
    SubscribeRequest.Builder request = SubscribeRequest.newBuilder();
    long maxEvents = -1;
    boolean untilStdin = false;
    String pageOf = null;
    try {
      if (args.length == 0 || args[0].startsWith("-")) {
        throw new IllegalArgumentException("missing ADDR");
      }
      for (int i = 1; i < args.length; i++) {
        switch (args[i]) {
          case "--agent" -> request.addAgentIds(args[++i]);
          case "--resume-revision" -> request.setResumeRevision(Long.parseUnsignedLong(args[++i]));
          case "--resume-incarnation" -> request.setResumeIncarnation(args[++i]);
          case "--max-events" -> maxEvents = Long.parseLong(args[++i]);
          case "--until-stdin-ends" -> untilStdin = true;
          case "--fetch-timeline" -> pageOf = args[++i];
          default -> throw new IllegalArgumentException("unexpected argument: " + args[i]);
        }
      }
    } catch (IllegalArgumentException | ArrayIndexOutOfBoundsException e) {
      System.err.println(e.getMessage() + "\n" + USAGE);
      System.exit(2);
    }
    System.exit(follow(args[0], request.build(), maxEvents, untilStdin, pageOf));
  }

  private static int follow(
      String addr, SubscribeRequest request, long maxEvents, boolean untilStdin, String pageOf)
      throws IOException {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(addr).usePlaintext().build();
    Context.CancellableContext call = Context.current().withCancellation();
    if (untilStdin) {
      Thread watcher = new Thread(() -> {
        try {
          while (System.in.read() >= 0) {
            // only its end matters
          }
        } catch (IOException ignored) {
          // a closed stdin ends the call the same way
        }
        call.cancel(null);
      });
      watcher.setDaemon(true);
      watcher.start();
    }
    BufferedWriter out =
        new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.US_ASCII));
    Base64.Encoder base64 = Base64.getEncoder();
    long printed = 0;
    Context previous = call.attach();
    try {
      if (pageOf != null) {
        printPage(channel, pageOf, out);
      }
      Iterator<SubscribeResponse> responses =
          EventServiceGrpc.newBlockingStub(channel).subscribe(request);
      while (responses.hasNext()) {
        for (Event event : responses.next().getEventsList()) {
          if (maxEvents >= 0 && printed >= maxEvents) {
            break;
          }
          out.write(base64.encodeToString(event.toByteArray()));
          out.write('\n');
          printed++;
        }
        out.flush();
        if (maxEvents >= 0 && printed >= maxEvents) {
          return 0;
        }
      }
      return 0; // the server ended the stream
    } catch (StatusRuntimeException e) {
      out.flush();
      Status status = e.getStatus();
      if (call.isCancelled() && status.getCode() == Status.Code.CANCELLED) {
        return 0; // we ended it
      }
      System.err.println("Subscribe failed: " + status.getCode() + ": " + status.getDescription());
      return 1;
    } finally {
      call.detach(previous);
      call.cancel(null);
      channel.shutdownNow();
    }
  }

  // The agent's newest 50 rows: `page:` and the FetchTimelineResponse's base64.
  private static void printPage(ManagedChannel channel, String agentId, BufferedWriter out)
      throws IOException {
    FetchTimelineRequest request =
        FetchTimelineRequest.newBuilder()
            .setAgentId(agentId)
            .setDirection(TimelineDirection.TIMELINE_DIRECTION_TAIL)
            .setLimit(50)
            .build();
    byte[] page = TimelineServiceGrpc.newBlockingStub(channel).fetchTimeline(request).toByteArray();
    out.write("page:" + Base64.getEncoder().encodeToString(page) + "\n");
    out.flush();
  }
}
