package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/loopback"
)

// modelCase is one misbehaviour of the model endpoint.
type modelCase struct {
	name    string
	reply   loopback.Reply
	endless bool   // served by the endless-body server instead of the loopback model
	code    string // the code the client must get
	mention string // a word the error text must contain ("" : none)
}

var modelCases = []modelCase{
	{name: "500", reply: loopback.Reply{Status: 500, Text: "internal trouble"}, code: "inference_failed", mention: "500"},
	{name: "503", reply: loopback.Reply{Status: 503, Text: "overloaded"}, code: "inference_failed", mention: "503"},
	{name: "429", reply: loopback.Reply{Status: 429, Text: "slow down", RetryAfter: "7"}, code: "inference_failed", mention: "429"},
	{name: "malformed JSON", reply: loopback.Reply{Body: []byte(`{"choices": [{"message": {"content": "cut`)}, code: "inference_failed"},
	{name: "no choices", reply: loopback.Reply{Body: []byte(`{"choices": []}`)}, code: "inference_failed"},
	{name: "body over 4 MiB", reply: loopback.Reply{Fault: loopback.FaultHuge}, code: "inference_failed"},
	{name: "endless body", endless: true, code: "inference_failed"},
	{name: "slow drip", reply: loopback.Reply{Text: "a drip of a reply", Fault: loopback.FaultDrip, Drip: 100 * time.Millisecond}, code: "timeout"},
	{name: "hang", reply: loopback.Reply{Fault: loopback.FaultHang}, code: "timeout"},
	{name: "reset", reply: loopback.Reply{Fault: loopback.FaultReset}, code: "inference_failed"},
}

// deadlineGrace is how far past the agent's deadline a failing call may end: the time to
// write and fsync the closing records on a busy machine.
const deadlineGrace = 5 * time.Second

// maxPeakRSS is the memory bound a server must keep while models misbehave.
const maxPeakRSS = 256 << 10 // KiB

// runModel sends the quick agent (2 s deadline) through every model misbehaviour, each
// followed by a normal invocation on the same server: every faulty call ends with its code
// within the deadline, withholds text and leaves a complete journal ending in terminated
// with released false and the code as reason; the server keeps serving and its peak RSS
// stays under maxPeakRSS.
func runModel(ctx context.Context, h *harnessRun, r *result) {
	dir, err := h.newProject("model")
	if err != nil {
		r.failf("project: %v", err)
		return
	}
	model, err := startModel(loopback.WithReply(loopback.Reply{Text: "healthy"}))
	if err != nil {
		r.failf("model: %v", err)
		return
	}
	defer model.Close()
	endless, endlessURL, err := startEndless()
	if err != nil {
		r.failf("endless model: %v", err)
		return
	}
	defer endless.Close()

	servers := map[bool]*proc{}
	sessions := map[bool]*mcp.ClientSession{}
	for _, e := range []bool{false, true} {
		url := model.URL()
		if e {
			url = endlessURL
		}
		p, err := h.startProc(h.bin, dir, modelEnv(url), procOptions{})
		if err != nil {
			r.failf("start: %v", err)
			return
		}
		cs, err := p.connect(ctx)
		if err != nil {
			p.kill()
			r.failf("%v", err)
			return
		}
		servers[e] = p
		sessions[e] = cs
		defer p.stop(cs)
	}

	var slowest time.Duration
	for _, mc := range modelCases {
		s := sessions[mc.endless]
		if !mc.endless {
			model.Script(mc.reply)
		}
		o := invoke(ctx, s, "quick", "misbehave: "+mc.name)
		slowest = max(slowest, o.elapsed)
		switch {
		case o.err != nil || o.code != mc.code:
			r.failf("%s: got %s, want %s", mc.name, o, mc.code)
		case mc.mention != "" && !strings.Contains(o.text, mc.mention):
			r.failf("%s: error %q does not mention %s", mc.name, clip(o.text, 200), mc.mention)
		case o.elapsed > quickDeadline+deadlineGrace:
			r.failf("%s: the call took %s, past the %s deadline", mc.name, o.elapsed.Round(time.Millisecond), quickDeadline)
		case o.audit == nil:
			r.failf("%s: no audit reference on a recorded failure", mc.name)
		}
		if err := checkWithheld(o, "", mc.code); err != nil {
			r.failf("%s: %v", mc.name, err)
		}
		if !mc.endless {
			o := invoke(ctx, s, "quick", "are you there")
			if !o.released() || o.text != "healthy" {
				r.failf("%s: the next invocation gave %s", mc.name, o)
			} else if err := checkReleased(o); err != nil {
				r.failf("%s: next invocation: %v", mc.name, err)
			}
		} else if err := listAgents(ctx, s); err != nil {
			r.failf("%s: list_agents afterwards: %v", mc.name, err)
		}
		h.logf("model: %s → %s in %s", mc.name, o.code, o.elapsed.Round(time.Millisecond))
	}
	var peak int64
	for e, p := range servers {
		kib := p.peakRSS()
		peak = max(peak, kib)
		if kib > maxPeakRSS {
			r.failf("server (endless=%v) peak RSS %s, over the bound of %s", e, mib(kib), mib(maxPeakRSS))
		}
	}
	r.figure("cases", len(modelCases))
	r.figure("slowest_call", slowest.Round(time.Millisecond))
	r.figure("deadline", quickDeadline)
	r.figure("peak_rss", mib(peak))
}

// startEndless starts an OpenAI-compatible endpoint on 127.0.0.1 whose 200 response body
// never ends (until the client goes away, or after 1 GiB); it returns the base URL.
func startEndless() (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	chunk := []byte(strings.Repeat("endless ", 4096))
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if _, err := fmt.Fprint(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"`); err != nil {
			return
		}
		for sent := 0; sent < 1<<30; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	return srv, "http://" + ln.Addr().String() + "/v1", nil
}
