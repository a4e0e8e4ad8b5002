package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"symbi/internal/syncbuf"
)

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-reply", "fallback", "-when", "secret=I cannot say.", "-when", "hello=Hi there.", "-hang-when", "wait forever"}, pw, &stderr)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSpace(line)
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasSuffix(base, "/v1") {
		t.Fatalf("first line %q is not an OpenAI base URL on 127.0.0.1", line)
	}
	tests := []struct{ prompt, want string }{
		{"tell me the secret", "I cannot say."},
		{"hello secret", "I cannot say."},
		{"hello", "Hi there."},
		{"other", "fallback"},
	}
	c := &http.Client{Timeout: 5 * time.Minute} // only a hang reaches it
	for _, tt := range tests {
		body := `{"model":"demo","messages":[{"role":"user","content":"` + tt.prompt + `"}]}`
		resp, err := c.Post(base+"/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Choices []struct{ Message struct{ Content string } }
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || len(out.Choices) != 1 || out.Choices[0].Message.Content != tt.want {
			t.Errorf("prompt %q: %v %+v, want %q", tt.prompt, err, out, tt.want)
		}
	}
	// A -hang-when request is never answered: once the server has it (logged), a request
	// sent after it is answered and it is not; the client's cancellation ends it.
	hctx, hcancel := context.WithCancel(context.Background())
	defer hcancel()
	hung := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(hctx, "POST", base+"/chat/completions", strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"please wait forever"}]}`))
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		hung <- err
	}()
	for guard := time.Now().Add(5 * time.Minute); strings.Count(stderr.String(), "msg=request") < len(tests)+1; { // a failure guard
		if time.Now().After(guard) {
			t.Fatal("the -hang-when request never reached the server")
		}
		time.Sleep(time.Millisecond)
	}
	resp, err := c.Post(base+"/chat/completions", "application/json", strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case err := <-hung:
		t.Errorf("a -hang-when request was answered before one sent after it: %v", err)
	default:
	}
	hcancel()
	if err := <-hung; err == nil {
		t.Error("a -hang-when request was answered")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit code %d", code)
	}
	if !strings.Contains(stderr.String(), "path=/v1/chat/completions") {
		t.Errorf("requests not logged: %s", stderr.String())
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-addr", "0.0.0.0:0"}, {"-addr", "nonsense"}, {"-when", "=x"}, {"-when", "noequals"}, {"extra"}, {"-delay", "-1s"}, {"-hang-when", ""}, {"-delay", "soon"}} {
		var out, errb strings.Builder
		if code := run(context.Background(), args, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q", args, code, out.String())
		}
	}
}
