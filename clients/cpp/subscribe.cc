// Follows a corral daemon's events through C++ stubs generated from proto/ (protoc's C++
// generator and grpc's plugin: namespace corral::v1), printing each Event as the base64 of its
// binary encoding, one per line (a test decodes them into corral.v1 messages and compares them
// with what another client received).
//
//   clients/cpp/run ADDR [--agent ID ...] [--resume-revision N] [--resume-incarnation S]
//                        [--max-events N] [--until-stdin-ends] [--fetch-timeline AGENT]
//
// --fetch-timeline first prints that agent's FetchTimeline page (TAIL, 50 rows) as one line,
// `page:` and the base64 of the FetchTimelineResponse, then subscribes.
//
// ADDR is HOST:PORT of the gRPC port (plaintext). Exits 0 after --max-events events, when the
// server ends the stream, or with --until-stdin-ends when its standard input ends (a parent
// that dies takes its subscriber with it); 1 when the call fails (`Subscribe failed: CODE:
// message` on stderr); 2 on bad arguments.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "corral/v1/event_service.grpc.pb.h"
#include "corral/v1/timeline_service.grpc.pb.h"

namespace {

const char kUsage[] =
    "usage: clients/cpp/run ADDR [--agent ID ...] [--resume-revision N] "
    "[--resume-incarnation S] [--max-events N] [--until-stdin-ends] [--fetch-timeline AGENT]";

std::string Base64(const std::string& bytes) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned n = (static_cast<unsigned char>(bytes[i]) << 16) |
                 (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                 static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  if (i < bytes.size()) {
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    bool two = i + 1 < bytes.size();
    if (two) n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[n >> 18];
    out += kAlphabet[(n >> 12) & 63];
    out += two ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

struct Options {
  std::string addr;
  corral::v1::SubscribeRequest request;
  long long max_events = -1;
  bool until_stdin = false;
  std::string page_of;  // an agent id: print its FetchTimeline page first
};

Options Parse(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') throw std::invalid_argument("missing ADDR");
  Options options;
  options.addr = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--agent") {
      options.request.add_agent_ids(value());
    } else if (arg == "--resume-revision") {
      options.request.set_resume_revision(std::stoull(value()));
    } else if (arg == "--resume-incarnation") {
      options.request.set_resume_incarnation(value());
    } else if (arg == "--max-events") {
      options.max_events = std::stoll(value());
    } else if (arg == "--fetch-timeline") {
      options.page_of = value();
    } else if (arg == "--until-stdin-ends") {
      options.until_stdin = true;
    } else {
      throw std::invalid_argument("unexpected argument: " + arg);
    }
  }
  return options;
}

const char* CodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                 "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                                 "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
                                 "UNAUTHENTICATED"};
  int index = static_cast<int>(code);
  return index >= 0 && index <= 16 ? kNames[index] : "UNKNOWN";
}

// The agent's newest 50 rows: `page:` and the FetchTimelineResponse's base64.
bool PrintPage(const std::shared_ptr<grpc::Channel>& channel, const std::string& agent_id) {
  corral::v1::FetchTimelineRequest request;
  request.set_agent_id(agent_id);
  request.set_direction(corral::v1::TIMELINE_DIRECTION_TAIL);
  request.set_limit(50);
  corral::v1::FetchTimelineResponse page;
  grpc::ClientContext context;
  grpc::Status status =
      corral::v1::TimelineService::NewStub(channel)->FetchTimeline(&context, request, &page);
  if (!status.ok()) {
    std::cerr << "FetchTimeline failed: " << CodeName(status.error_code()) << ": "
              << status.error_message() << std::endl;
    return false;
  }
  std::string bytes;
  page.SerializeToString(&bytes);
  std::cout << "page:" << Base64(bytes) << std::endl;
  return true;
}

int Follow(const Options& options) {
  auto channel = grpc::CreateChannel(options.addr, grpc::InsecureChannelCredentials());
  if (!options.page_of.empty() && !PrintPage(channel, options.page_of)) return 1;
  auto stub = corral::v1::EventService::NewStub(channel);
  grpc::ClientContext context;
  std::atomic<bool> ended_by_us{false};
  if (options.until_stdin) {
    std::thread([&context, &ended_by_us] {
      char buffer[4096];
      while (std::fread(buffer, 1, sizeof buffer, stdin) > 0) {
      }
      ended_by_us = true;
      context.TryCancel();
    }).detach();
  }
  auto reader = stub->Subscribe(&context, options.request);
  corral::v1::SubscribeResponse response;
  long long printed = 0;
  std::string bytes;
  while (reader->Read(&response)) {
    for (const auto& event : response.events()) {
      if (options.max_events >= 0 && printed >= options.max_events) break;
      event.SerializeToString(&bytes);
      std::cout << Base64(bytes) << '\n';
      ++printed;
    }
    std::cout.flush();
    if (options.max_events >= 0 && printed >= options.max_events) {
      ended_by_us = true;
      context.TryCancel();
      reader->Finish();
      return 0;
    }
  }
  grpc::Status status = reader->Finish();
  if (status.ok() || (ended_by_us && status.error_code() == grpc::StatusCode::CANCELLED)) {
    return 0;  // the server ended the stream, or we did
  }
  std::cerr << "Subscribe failed: " << CodeName(status.error_code()) << ": "
            << status.error_message() << std::endl;
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = Parse(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n" << kUsage << std::endl;
    return 2;
  }
  std::_Exit(Follow(options));  // not waiting for the stdin watcher
}
