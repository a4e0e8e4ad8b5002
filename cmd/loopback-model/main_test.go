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
)

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr strings.Builder
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
	// A -hang-when request is never answered: the client's own deadline ends it.
	hctx, hcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer hcancel()
	req, _ := http.NewRequestWithContext(hctx, "POST", base+"/chat/completions", strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"please wait forever"}]}`))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a -hang-when request was answered: %s", resp.Status)
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
