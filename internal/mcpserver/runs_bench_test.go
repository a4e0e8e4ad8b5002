package mcpserver_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/benchfix"
	"symbi/internal/invoke"
	"symbi/internal/ledger"
	"symbi/internal/mcpserver"
	"symbi/internal/policy"
	"symbi/internal/runs"
)

// benchServer serves a project with one agent, a Cedar policy and the project ledger, as
// symbi mcp does, against a zero-latency loopback model, and returns a client session
// connected over an in-memory transport, and the server's run manager.
func benchServer(b *testing.B) (*mcp.ClientSession, *runs.Manager) {
	b.Helper()
	fx := benchfix.New(b)
	p, reg, prov := fx.Project, fx.Registry, fx.Provider
	lw, _, err := ledger.OpenProject(p.Root(), "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lw.Close() })
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Provider: prov, Ledger: lw})
	rm := runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg, Ledger: lw})
	srv := mcpserver.New(mcpserver.Config{Project: p, Registry: reg, Runs: rm})
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close(); ss.Close(); runner.Shutdown(ctx); rm.Close() })
	return cs, rm
}

// benchCall calls a tool for the helper agent and returns its structured result; a tool
// error is returned as an error.
func benchCall(cs *mcp.ClientSession, name string) (any, error) {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"agent": "helper", "prompt": "hello"}})
	if err == nil && res.IsError {
		err = fmt.Errorf("%s: %v", name, res.Content)
	}
	if err != nil {
		return nil, err
	}
	return res.StructuredContent, nil
}

// benchBatch runs c concurrent calls of fn and returns each call's latency.
func benchBatch(b *testing.B, c int, fn func(i int) error) []time.Duration {
	lat := make([]time.Duration, c)
	var wg sync.WaitGroup
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := fn(i); err != nil {
				b.Error(err)
			}
			lat[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	return lat
}

// awaitEnd waits until the run has ended and every event of it is durable.
func awaitEnd(rm *runs.Manager, runID string) error {
	var after int64
	for {
		evs, err := rm.Events(context.Background(), runID, after, runs.MaxLimit, runs.MaxWait)
		if err != nil {
			return err
		}
		if after = evs.NextCursor; evs.Done {
			return nil
		}
	}
}

func benchP50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkStartRun measures, through the MCP server — the go-sdk client over an
// in-memory transport, the project ledger on, a zero-latency loopback model — the latency
// of start_run until it answers with the run id (the run's started record durable) and,
// side by side in each iteration, the whole latency of invoke_agent for the same agent;
// batches of c concurrent calls. Between the two, untimed, it waits until the started
// runs have ended, so the invoke_agent calls never share the machine with them. It
// reports each per-call latency (mean and p50) and the ratio start_run / invoke_agent.
func BenchmarkStartRun(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			cs, rm := benchServer(b)
			var ls, li []time.Duration
			ids := make([]string, c)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ls = append(ls, benchBatch(b, c, func(j int) error {
					out, err := benchCall(cs, "start_run")
					if err != nil {
						return err
					}
					id, _ := out.(map[string]any)["run_id"].(string)
					if id == "" {
						return fmt.Errorf("start_run answered %v", out)
					}
					ids[j] = id
					return nil
				})...)
				b.StopTimer()
				for _, id := range ids {
					if err := awaitEnd(rm, id); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				li = append(li, benchBatch(b, c, func(int) error { _, err := benchCall(cs, "invoke_agent"); return err })...)
			}
			b.StopTimer()
			mean := func(d []time.Duration) float64 {
				var t time.Duration
				for _, x := range d {
					t += x
				}
				return float64(t.Microseconds()) / float64(len(d))
			}
			b.ReportMetric(mean(ls), "start-run-us")
			b.ReportMetric(mean(li), "invoke-us")
			b.ReportMetric(float64(benchP50(ls).Microseconds()), "start-run-p50-us")
			b.ReportMetric(float64(benchP50(li).Microseconds()), "invoke-p50-us")
			b.ReportMetric(mean(ls)/mean(li), "ratio")
			b.ReportMetric(float64(benchP50(ls))/float64(benchP50(li)), "ratio-p50")
			b.ReportMetric(0, "ns/op")
		})
	}
}
