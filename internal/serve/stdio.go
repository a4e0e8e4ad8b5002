package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"symbi/internal/mcpserver"
)

// Stdio serves the project over stdin and stdout until stdin closes, the client stops
// reading stdout, or a stop signal comes (o.Watch), then lets the runs in flight finish
// their journals.
func Stdio(o Options, stdin io.Reader, stdout io.Writer) error {
	catchSIGPIPE()
	s, err := open(o)
	if err != nil {
		return err
	}
	defer s.close()
	log, watch, runner := o.Log, o.Watch, s.runner
	s.loadRegistry()
	server := mcpserver.New(s.cfg)
	s.armShutdown()
	log.Info("serving", s.attrs...)

	ctx, clientGone := context.WithCancelCause(watch.Context())
	defer clientGone(nil)
	out := mcpserver.WatchWrites(stdout, func(err error) {
		log.Warn("the client stopped reading stdout; cancelling the runs in flight", "err", err)
		clientGone(fmt.Errorf("writing to stdout: %w", err))
	})
	// stdin closing ends the session: the SDK cancels the calls in flight, and Run returns
	// once they have. The shutdown begins at the close, not then: the runs start_run began
	// are cancelled at once, and a signal from here on hurries them.
	stdinEnded := make(chan struct{})
	in := mcpserver.WatchReads(stdin, func(err error) {
		runner.Stop()
		why := "the client closed stdin"
		if !errors.Is(err, io.EOF) {
			why = fmt.Sprintf("reading stdin: %v", err)
		}
		watch.begin(why)
		close(stdinEnded)
	})
	runDone := make(chan error, 1)
	go func() { runDone <- server.Run(ctx, mcpserver.NewStdioTransport(in, out)) }()
	var runErr error
	select {
	case runErr = <-runDone:
	case <-stdinEnded:
		// The client is done. The runs end, each writing terminated; Run returns once
		// the calls have — but a call blocked writing to a client that no longer reads
		// would hold it forever: TransportGrace, as below.
		shutdownRuns(runner, log)
		runErr = awaitSession(runDone, s)
	case <-ctx.Done():
		// A signal, or a client that stopped reading: cancel the runs in flight at once
		// and wait, within the grace period, for each to write terminated. The SDK's Run
		// then waits for the calls; a call blocked writing to a client that no longer
		// reads would hold it forever, so it gets TransportGrace and is then left behind:
		// every journal is finished by then, and exiting loses no record.
		watch.begin(context.Cause(ctx).Error())
		shutdownRuns(runner, log)
		runErr = awaitSession(runDone, s)
	}
	signalled := ctx.Err() != nil // a signal, or the client gone: both end the session cleanly
	// The signals stay caught until every run has finished its journal: a client that
	// closes stdin and sends SIGTERM after a grace period must not kill the runs' ends;
	// its signal hurries them instead (Watch).
	shutdownRuns(runner, log)
	if runErr != nil && !signalled {
		return fmt.Errorf("MCP session: %w", runErr)
	}
	return nil
}

// awaitSession waits TransportGrace at most for the MCP session to end, once every run
// has finished, and returns how it ended (nil when it did not).
func awaitSession(runDone <-chan error, s *server) error {
	select {
	case err := <-runDone:
		return err
	case <-time.After(TransportGrace):
		s.o.Log.Warn("the MCP session did not end: writes to the client are blocked; exiting with every run finished", "waited", TransportGrace)
		return nil
	}
}
