package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"syscall"
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

// benchTransport is one client session of the transport benchmark.
type benchTransport struct {
	name string
	cs   *mcp.ClientSession
}

// benchTransports serves one project — one governed runner with the project ledger, one
// run manager, one MCP server, against a zero-latency loopback model — over several
// transports at once, and returns a go-sdk client session on each, in this order:
//
//   - stdio: the server's stdio transport (mcpserver.NewStdioTransport, what symbi mcp
//     serves on stdin/stdout) over two OS pipes, the client's mcp.IOTransport on their
//     other ends: newline-delimited JSON-RPC;
//   - http: the server's Streamable HTTP handler (mcpserver.NewHTTPHandler, what symbi
//     mcp --http serves, without authentication) on a loopback listener, the client's
//     mcp.StreamableClientTransport with its default HTTP client (http.DefaultClient,
//     which keeps at most 2 idle connections to a host);
//   - http-pool: the same, with an HTTP client that keeps up to 64 idle connections to
//     a host, so concurrent calls reuse their connections;
//   - mem: the go-sdk's in-memory transports (what the other benchmarks of this package
//     and of internal/invoke use): no framing, no system calls, the floor of the other
//     three.
//
// The runner admits up to 256 runs in flight (symbi mcp --max-runs, 64 by default), so
// 64 concurrent calls are never refused as busy. Every session calls the same server:
// runs asked for over HTTP are recorded with the stdio caller instead of symbi mcp
// --http's "anonymous", a difference of a few bytes in their records.
func benchTransports(b *testing.B) []benchTransport {
	b.Helper()
	fx := benchfix.New(b)
	p, reg, prov := fx.Project, fx.Registry, fx.Provider
	lw, _, err := ledger.OpenProject(p.Root(), "")
	if err != nil {
		b.Fatal(err)
	}
	runner := invoke.New(invoke.Config{Project: p, Registry: reg, Policies: policy.Load(p.Root()), Provider: prov, Ledger: lw, MaxRuns: 256})
	rm := runs.New(runs.Config{Root: p.Root(), Runner: runner, Registry: reg, Ledger: lw})
	srv := mcpserver.New(mcpserver.Config{Project: p, Registry: reg, Runs: rm})
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	var closers []func()
	b.Cleanup(func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		runner.Shutdown(ctx)
		rm.Close()
		lw.Close()
	})

	// stdio: client → inW → inR → server; server → outW → outR → client.
	inR, inW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	ss, err := srv.Connect(ctx, mcpserver.NewStdioTransport(inR, outW), nil)
	if err != nil {
		b.Fatal(err)
	}
	closers = append(closers, func() { inR.Close(); outW.Close(); ss.Close() })
	stdio, err := client.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		b.Fatal(err)
	}
	closers = append(closers, func() { stdio.Close(); inW.Close(); outR.Close() })

	// http and http-pool: one loopback listener; the sessions are closed (ending their
	// event streams) before it is.
	hs := httptest.NewServer(mcpserver.NewHTTPHandler(srv, mcpserver.HTTPOptions{}))
	closers = append(closers, hs.Close)
	def, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + mcpserver.MCPPath}, nil)
	if err != nil {
		b.Fatal(err)
	}
	closers = append(closers, func() { def.Close() })
	pt := &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}
	pool, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL + mcpserver.MCPPath, HTTPClient: &http.Client{Transport: pt}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	closers = append(closers, func() { pool.Close(); pt.CloseIdleConnections() })
	// mem
	mst, mct := mcp.NewInMemoryTransports()
	mss, err := srv.Connect(ctx, mst, nil)
	if err != nil {
		b.Fatal(err)
	}
	closers = append(closers, func() { mss.Close() })
	mem, err := client.Connect(ctx, mct, nil)
	if err != nil {
		b.Fatal(err)
	}
	closers = append(closers, func() { mem.Close() })
	return []benchTransport{{"stdio", stdio}, {"http", def}, {"http-pool", pool}, {"mem", mem}}
}

// BenchmarkHTTPThroughput measures invoke_agent throughput through the same governed
// server — the project ledger on, a zero-latency loopback model — over stdio and over
// Streamable HTTP (benchTransports), side by side in each iteration: on each transport
// in turn (the order reversed every other iteration), one untimed call, which absorbs
// what the previous transport's calls left running, then a timed block of batches of c
// concurrent calls (16 batches at c=1, one at c=64), timed from its first call to its
// last answer. It reports, for each transport, calls a second, the p50 latency of a
// call, and the CPU time (user and system) and bytes allocated per call of the whole
// process — client, server and model together; less at the mercy of other work on the
// machine than times are — and the throughput ratios http/stdio, http-pool/stdio and
// stdio/mem. The list_agents rows do the same with a tool call that starts no run (the
// registry snapshot, ≈ 1 KB of JSON), so that what they measure is mostly the
// transports and the SDK.
func BenchmarkHTTPThroughput(b *testing.B) {
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"invoke_agent", map[string]any{"agent": "helper", "prompt": "hello"}},
		{"list_agents", map[string]any{}},
	}
	for _, call := range calls {
		for _, c := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/c=%d", call.tool, c), func(b *testing.B) {
				ts := benchTransports(b)
				rounds := max(1, 16/c)
				batch := func(t benchTransport, c int) []time.Duration {
					return benchBatch(b, c, func(int) error {
						res, err := t.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
						if err == nil && res.IsError {
							err = fmt.Errorf("%s over %s: %v", call.tool, t.name, res.Content)
						}
						return err
					})
				}
				for _, t := range ts { // warm up: connections, caches
					batch(t, c)
				}
				total := make([]time.Duration, len(ts))
				lat := make([][]time.Duration, len(ts))
				alloc := make([]uint64, len(ts))
				cpu := make([]time.Duration, len(ts))
				var m0, m1 runtime.MemStats
				var r0, r1 syscall.Rusage
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for k := range ts {
						if i%2 == 1 {
							k = len(ts) - 1 - k
						}
						batch(ts[k], 1) // settle
						runtime.ReadMemStats(&m0)
						syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
						t0 := time.Now()
						for range rounds {
							lat[k] = append(lat[k], batch(ts[k], c)...)
						}
						total[k] += time.Since(t0)
						syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
						runtime.ReadMemStats(&m1)
						cpu[k] += benchCPU(&r1) - benchCPU(&r0)
						alloc[k] += m1.TotalAlloc - m0.TotalAlloc
					}
				}
				b.StopTimer()
				n := float64(b.N * rounds * c)
				rate := map[string]float64{}
				for k, t := range ts {
					rate[t.name] = n / total[k].Seconds()
					b.ReportMetric(rate[t.name], t.name+"-calls/s")
					b.ReportMetric(float64(benchP50(lat[k]).Microseconds()), t.name+"-p50-us")
					b.ReportMetric(float64(cpu[k].Microseconds())/n, t.name+"-cpu-us/call")
					b.ReportMetric(float64(alloc[k])/n, t.name+"-B/call")
				}
				b.ReportMetric(rate["http"]/rate["stdio"], "http/stdio")
				b.ReportMetric(rate["http-pool"]/rate["stdio"], "http-pool/stdio")
				b.ReportMetric(rate["stdio"]/rate["mem"], "stdio/mem")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// benchCPU is the user and system CPU time in ru.
func benchCPU(ru *syscall.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
