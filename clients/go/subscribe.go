// Command subscribe follows a corral daemon's events through Go stubs generated from proto/
// (protoc-gen-go and protoc-gen-go-grpc), printing each Event as the base64 of its binary
// encoding, one per line (a test decodes them into corral.v1 messages and compares them with
// what another client received).
//
//	clients/go/run ADDR [--agent ID ...] [--resume-revision N] [--resume-incarnation S]
//	                    [--max-events N] [--until-stdin-ends] [--fetch-timeline AGENT]
//
// --fetch-timeline first prints that agent's FetchTimeline page (TAIL, 50 rows) as one line,
// `page:` and the base64 of the FetchTimelineResponse, then subscribes.
//
// ADDR is HOST:PORT of the gRPC port (plaintext). Exits 0 after --max-events events, when the
// server ends the stream, on SIGINT/SIGTERM, or with --until-stdin-ends when its standard
// input ends (a parent that dies takes its subscriber with it); 1 when the call fails
// (`Subscribe failed: CODE: message` on stderr); 2 on bad arguments.
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	corralv1 "corralgo/corral/v1"
)

const usage = "usage: clients/go/run ADDR [--agent ID ...] [--resume-revision N] " +
	"[--resume-incarnation S] [--max-events N] [--until-stdin-ends] [--fetch-timeline AGENT]"

type agentIDs []string

func (ids *agentIDs) String() string { return strings.Join(*ids, ",") }

func (ids *agentIDs) Set(id string) error {
	*ids = append(*ids, id)
	return nil
}

type options struct {
	addr       string
	request    *corralv1.SubscribeRequest
	maxEvents  int64 // -1: no limit
	untilStdin bool
	pageOf     string // an agent id: print its FetchTimeline page first
}

func parse(args []string) (*options, error) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil, fmt.Errorf("missing ADDR")
	}
	flags := flag.NewFlagSet("subscribe", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	var agents agentIDs
	flags.Var(&agents, "agent", "an agent id (repeatable; none: every agent)")
	resume := flags.Int64("resume-revision", -1, "resume after this revision")
	incarnation := flags.String("resume-incarnation", "", "the event log the revision belongs to")
	maxEvents := flags.Int64("max-events", -1, "exit after this many events")
	untilStdin := flags.Bool("until-stdin-ends", false, "exit when standard input ends")
	pageOf := flags.String("fetch-timeline", "", "print this agent's timeline page first")
	if err := flags.Parse(args[1:]); err != nil {
		return nil, err
	}
	if flags.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument: %s", flags.Arg(0))
	}
	request := &corralv1.SubscribeRequest{AgentIds: agents, ResumeIncarnation: *incarnation}
	if *resume >= 0 {
		revision := uint64(*resume)
		request.ResumeRevision = &revision
	}
	return &options{args[0], request, *maxEvents, *untilStdin, *pageOf}, nil
}

func main() {
	opts, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s\n%s\n", err, usage)
		os.Exit(2)
	}
	os.Exit(follow(opts))
}

func follow(opts *options) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-signals; cancel() }()
	if opts.untilStdin {
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	}
	conn, err := grpc.Dial(opts.addr, grpc.WithInsecure())
	if err != nil {
		fmt.Fprintf(os.Stderr, "Subscribe failed: %s\n", err)
		return 1
	}
	defer conn.Close()
	if opts.pageOf != "" {
		if code := printPage(ctx, conn, opts.pageOf); code != 0 {
			return code
		}
	}
	stream, err := corralv1.NewEventServiceClient(conn).Subscribe(ctx, opts.request)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	printed := int64(0)
	for err == nil {
		var response *corralv1.SubscribeResponse
		if response, err = stream.Recv(); err != nil {
			break
		}
		for _, event := range response.GetEvents() {
			if opts.maxEvents >= 0 && printed >= opts.maxEvents {
				break
			}
			data, marshalErr := proto.Marshal(event)
			if marshalErr != nil {
				fmt.Fprintf(os.Stderr, "cannot encode an event: %s\n", marshalErr)
				return 1
			}
			out.WriteString(base64.StdEncoding.EncodeToString(data))
			out.WriteByte('\n')
			printed++
		}
		out.Flush()
		if opts.maxEvents >= 0 && printed >= opts.maxEvents {
			return 0
		}
	}
	if err == io.EOF || (ctx.Err() != nil && status.Code(err) == codes.Canceled) {
		return 0 // the server ended the stream, or we did
	}
	fmt.Fprintf(os.Stderr, "Subscribe failed: %s: %s\n", status.Code(err), status.Convert(err).Message())
	return 1
}

// printPage prints the agent's newest 50 rows as `page:` and the FetchTimelineResponse's base64.
func printPage(ctx context.Context, conn *grpc.ClientConn, agentID string) int {
	limit := uint32(50)
	page, err := corralv1.NewTimelineServiceClient(conn).FetchTimeline(ctx, &corralv1.FetchTimelineRequest{
		AgentId: agentID, Direction: corralv1.TimelineDirection_TIMELINE_DIRECTION_TAIL, Limit: &limit,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FetchTimeline failed: %s: %s\n", status.Code(err), status.Convert(err).Message())
		return 1
	}
	data, err := proto.Marshal(page)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot encode the page: %s\n", err)
		return 1
	}
	fmt.Printf("page:%s\n", base64.StdEncoding.EncodeToString(data))
	return 0
}
