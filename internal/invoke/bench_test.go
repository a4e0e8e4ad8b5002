package invoke_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// benchServers builds MCP servers over one project and one zero-latency loopback model,
// each reached by a client session through in-memory transports.
type benchServers struct {
	b   *testing.B
	cfg invoke.Config
}

func newBenchServers(b *testing.B) *benchServers {
	b.Helper()
	fx := benchfix.New(b)
	return &benchServers{b: b, cfg: invoke.Config{Project: fx.Project, Registry: fx.Registry, Policies: policy.Load(fx.Project.Root()), Provider: fx.Provider}}
}

// governed is a session to a governed server; with the project ledger, its runs are
// recorded there too.
func (s *benchServers) governed(withLedger bool) *mcp.ClientSession {
	cfg := s.cfg
	if withLedger {
		lw, _, err := ledger.OpenProject(cfg.Project.Root(), "")
		if err != nil {
			s.b.Fatal(err)
		}
		s.b.Cleanup(func() { lw.Close() })
		cfg.Ledger = lw
	}
	return s.connect(invoke.New(cfg))
}

// ungoverned is a session to a server whose runner takes the benchmark-only path without
// journal and policy.
func (s *benchServers) ungoverned() *mcp.ClientSession {
	r := invoke.New(s.cfg)
	invoke.SetUngoverned(r)
	return s.connect(r)
}

func (s *benchServers) connect(r *invoke.Runner) *mcp.ClientSession {
	b, p, reg := s.b, s.cfg.Project, s.cfg.Registry
	srv := mcpserver.New(mcpserver.Config{Project: p, Registry: reg, Runs: runs.New(runs.Config{Root: p.Root(), Runner: r, Registry: reg})})
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
	b.Cleanup(func() { cs.Close(); ss.Close(); r.Shutdown(ctx) })
	return cs
}

// fsyncFloor does the durable writes a run cannot avoid, in the order of writes, with raw
// system calls: create the run's file, fsync it and its directory, then three appends each
// followed by fsync (the opening records; inference_finished; policy_evaluated, durable
// before the ledger entry names it); one line appended to the project's ledger, ledger
// (shared by every run, opened O_APPEND), and fsynced — concurrent runs' fsyncs of it are
// the file system's to share, as the ledger's group commit shares them; and a last append
// and fsync (terminated).
func fsyncFloor(dir string, ledger *os.File, i int) error {
	// The files are kept, as journals are, so both directories grow alike.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("floor-%d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	line := make([]byte, 600)
	for _, step := range []func() error{f.Sync, d.Sync} {
		if err := step(); err != nil {
			return err
		}
	}
	for range 3 {
		if _, err := f.Write(line); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if _, err := ledger.Write(line[:400]); err != nil {
		return err
	}
	if err := ledger.Sync(); err != nil {
		return err
	}
	if _, err := f.Write(line); err != nil {
		return err
	}
	return f.Sync()
}

// batch runs c concurrent calls of fn and returns each call's latency.
func batch(b *testing.B, c int, fn func(i int) error) []time.Duration {
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

// BenchmarkInvoke measures invoke_agent end to end through the MCP server — a client
// calling the tool over an in-memory transport — governed, with the project ledger, and
// through the same server whose runner has journal and policy switched off, side by side
// in one run, at concurrency 1, 8 and 64, together with the raw cost of the fsyncs a
// governed run cannot avoid (fsyncFloor, its ledger line included). It reports
// per-invocation wall time (batch time / concurrency) for each, the p50 latencies, and the
// ratios governed / (ungoverned + fsync floor), of the per-invocation times and of the
// p50s; and, beside them, the p50 of the two combined — each call the ungoverned call and
// then the floor — and governed's p50 over it (ratio-p50-combined).
func BenchmarkInvoke(b *testing.B) {
	for _, c := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			srv := newBenchServers(b)
			gov, ungov := srv.governed(true), srv.ungoverned()
			floorDir := b.TempDir()
			floorLedger, err := os.OpenFile(filepath.Join(floorDir, "ledger"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer floorLedger.Close()
			var tg, tu, tf time.Duration
			var lg, lu, lf, lc []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				lg = append(lg, batch(b, c, call(gov))...)
				t1 := time.Now()
				lu = append(lu, batch(b, c, call(ungov))...)
				t2 := time.Now()
				lf = append(lf, batch(b, c, func(j int) error { return fsyncFloor(floorDir, floorLedger, 2*(i*c+j)) })...)
				t3 := time.Now()
				// Combined: each call the ungoverned call and then the floor's system calls, so
				// that at c > 1 the floor's kernel work competes for the cores as a governed
				// run's does.
				lc = append(lc, batch(b, c, func(j int) error {
					if err := call(ungov)(j); err != nil {
						return err
					}
					return fsyncFloor(floorDir, floorLedger, 2*(i*c+j)+1)
				})...)
				tg, tu, tf = tg+t1.Sub(t0), tu+t2.Sub(t1), tf+t3.Sub(t2)
			}
			b.StopTimer()
			n := float64(b.N * c)
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n }
			b.ReportMetric(per(tg), "governed-ns/inv")
			b.ReportMetric(per(tu), "ungoverned-ns/inv")
			b.ReportMetric(per(tf), "fsync-floor-ns/inv")
			b.ReportMetric(per(tg)/(per(tu)+per(tf)), "ratio")
			b.ReportMetric(float64(p50(lg).Microseconds()), "governed-p50-us")
			b.ReportMetric(float64(p50(lu).Microseconds()), "ungoverned-p50-us")
			b.ReportMetric(float64(p50(lf).Microseconds()), "fsync-floor-p50-us")
			b.ReportMetric(float64(p50(lg))/float64(p50(lu)+p50(lf)), "ratio-p50")
			b.ReportMetric(float64(p50(lc).Microseconds()), "combined-p50-us")
			b.ReportMetric(float64(p50(lg))/float64(p50(lc)), "ratio-p50-combined")
			// What a governed run that cost nothing beyond the floor would score on ratio-p50.
			b.ReportMetric(float64(p50(lc))/float64(p50(lu)+p50(lf)), "floor-only-ratio-p50")
			b.ReportMetric(n/tg.Seconds(), "governed-inv/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkLedger measures what the project ledger costs a governed run: invoke_agent end
// to end through the MCP server with the ledger and without it, side by side in one run,
// at concurrency 1 and 64 (where group commit lets concurrent runs share its fsyncs). It
// reports each per-invocation time, the p50s and the throughput ratio with / without.
func BenchmarkLedger(b *testing.B) {
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			srv := newBenchServers(b)
			led, gov := srv.governed(true), srv.governed(false)
			var tl, tg time.Duration
			var ll, lg []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				ll = append(ll, batch(b, c, call(led))...)
				t1 := time.Now()
				lg = append(lg, batch(b, c, call(gov))...)
				tl, tg = tl+t1.Sub(t0), tg+time.Since(t1)
			}
			b.StopTimer()
			n := float64(b.N * c)
			b.ReportMetric(float64(tl.Nanoseconds())/n, "ledger-ns/inv")
			b.ReportMetric(float64(tg.Nanoseconds())/n, "no-ledger-ns/inv")
			b.ReportMetric(float64(p50(ll).Microseconds()), "ledger-p50-us")
			b.ReportMetric(float64(p50(lg).Microseconds()), "no-ledger-p50-us")
			b.ReportMetric(tg.Seconds()/tl.Seconds(), "throughput-ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// call returns one invoke_agent call on cs, for batch.
func call(cs *mcp.ClientSession) func(int) error {
	return func(int) error {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "invoke_agent", Arguments: map[string]any{"agent": "helper", "prompt": "hello"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("invoke_agent: %v", res.Content)
		}
		return err
	}
}

func p50(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
