// Command loopback-model runs a scripted language-model server on the loopback interface,
// for demos and manual testing of symbi. It speaks OpenAI-compatible chat completions
// (POST /v1/chat/completions) and Anthropic Messages (POST /v1/messages).
//
// Usage:
//
//	loopback-model [-addr 127.0.0.1:0] [-reply TEXT] [-when SUBSTRING=TEXT]... [-delay DURATION] [-hang] [-hang-when SUBSTRING]...
//
// The first line of stdout is the OpenAI base URL, http://127.0.0.1:PORT/v1 (the
// Anthropic base URL is the same without /v1). It serves until interrupted. Each request
// is answered with the TEXT of the first -when rule whose SUBSTRING occurs in the last
// user message, else with the -reply text, after -delay. A request whose prompt contains
// a -hang-when SUBSTRING — every request, with -hang — is never answered: it waits until
// the client gives up (a cancellation, or symbi's deadline). Requests are logged to
// stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"symbi/internal/loopback"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// rule answers Text when Substring occurs in the prompt.
type rule struct{ Substring, Text string }

type rules []rule

func (r *rules) String() string { return fmt.Sprint(*r) }

func (r *rules) Set(v string) error {
	sub, text, ok := strings.Cut(v, "=")
	if !ok || sub == "" {
		return errors.New("want SUBSTRING=TEXT with a non-empty SUBSTRING")
	}
	*r = append(*r, rule{sub, text})
	return nil
}

// substrings is a repeatable flag of non-empty substrings.
type substrings []string

func (s *substrings) String() string { return fmt.Sprint(*s) }

func (s *substrings) Set(v string) error {
	if v == "" {
		return errors.New("want a non-empty SUBSTRING")
	}
	*s = append(*s, v)
	return nil
}

// in reports whether text contains one of the substrings.
func (s substrings) in(text string) bool {
	for _, sub := range s {
		if strings.Contains(text, sub) {
			return true
		}
	}
	return false
}

// run serves until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loopback-model", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listening address; the host must be a loopback address")
	reply := fs.String("reply", loopback.DefaultText, "text of every reply no -when rule matches")
	var when rules
	fs.Var(&when, "when", "SUBSTRING=TEXT: answer TEXT when the prompt contains SUBSTRING (repeatable; first match wins)")
	delay := fs.Duration("delay", 0, "wait this long before every answer (e.g. 5s), to watch progress or try a timeout")
	hangAll := fs.Bool("hang", false, "never answer any request: it waits until the client gives up (try cancellation)")
	var hangWhen substrings
	fs.Var(&hangWhen, "hang-when", "SUBSTRING: never answer a request whose prompt contains SUBSTRING (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "loopback-model: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *delay < 0 {
		fmt.Fprintf(stderr, "loopback-model: -delay %v: want a duration of 0 or more\n", *delay)
		return 2
	}
	if err := checkLoopback(*addr); err != nil {
		fmt.Fprintf(stderr, "loopback-model: -addr: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	s := loopback.New(loopback.WithAddr(*addr), loopback.WithResponder(func(r loopback.Request) loopback.Reply {
		if *hangAll || hangWhen.in(r.Prompt) {
			return loopback.Reply{Fault: loopback.FaultHang}
		}
		for _, w := range when {
			if strings.Contains(r.Prompt, w.Substring) {
				return loopback.Reply{Text: w.Text, Delay: *delay}
			}
		}
		return loopback.Reply{Text: *reply, Delay: *delay}
	}))
	s.OnRequest(func(r loopback.Request) {
		log.Info("request", "method", r.Method, "path", r.Path, "format", r.Format, "model", r.Model, "bytes", len(r.Body))
	})
	if err := s.Start(); err != nil {
		fmt.Fprintf(stderr, "loopback-model: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, s.URL())
	log.Info("serving", "openai_base_url", s.URL(), "anthropic_base_url", s.AnthropicURL())
	<-ctx.Done()
	s.Close()
	return 0
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("host %q is not a loopback address", host)
	}
	return nil
}
