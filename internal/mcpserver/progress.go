package mcpserver

import (
	"context"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/invoke"
)

// progressReporter sends progress notifications for the stages of a run when the client
// asked for them (a progress token). report never blocks the run: a run reports each of
// the len(invoke.Stages) stages at most once, in order, into a queue of that capacity,
// and a sender goroutine writes them out — so a client that stops reading stalls only its
// own notifications, never the run or its journal. progress is the stage's position in
// invoke.Stages. stop delivers what is queued and ends the sender, so that no notification
// follows the call's result; it waits for the transport as writing the result would.
func progressReporter(ctx context.Context, req *mcp.CallToolRequest) (report func(invoke.Stage), stop func()) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil, func() {}
	}
	var (
		mu     sync.Mutex
		last   int // position of the last stage queued
		closed bool
	)
	queue := make(chan invoke.Stage, len(invoke.Stages))
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for st := range queue {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(slices.Index(invoke.Stages, st) + 1),
				Total:         float64(len(invoke.Stages)),
				Message:       string(st),
			})
		}
	}()
	report = func(st invoke.Stage) {
		mu.Lock()
		defer mu.Unlock()
		pos := slices.Index(invoke.Stages, st) + 1
		if closed || pos <= last { // after the result, or not forward: progress must increase
			return
		}
		last = pos
		select {
		case queue <- st:
		default: // unreachable: each stage is queued at most once
		}
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			mu.Lock()
			closed = true
			close(queue)
			mu.Unlock()
			<-finished
		})
	}
	return report, stop
}
