package safefetch_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/safefetch"
)

func server() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/doc", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("accept=" + r.Header.Get("Accept")))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/doc", http.StatusFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		w.Write(make([]byte, 101))
	})
	mux.HandleFunc("/big-chunked", func(w http.ResponseWriter, _ *http.Request) {
		for range 11 {
			w.Write(make([]byte, 10))
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers: only the client's timeout or cancellation ends it
		// Abort rather than return: a handler that returns answers 200 with an empty
		// body, which the client can still read while it closes the connection.
		panic(http.ErrAbortHandler)
	})
	mux.HandleFunc("/missing", http.NotFound)
	return mux
}

func TestGet(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(server())
	defer tlsSrv.Close()
	plainSrv := httptest.NewServer(server())
	defer plainSrv.Close()
	roots := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	base := safefetch.Options{AllowPrivate: true, RootCAs: roots, MaxBytes: 100, Timeout: time.Minute, Accept: "application/json"}
	with := func(f func(*safefetch.Options)) safefetch.Options { o := base; f(&o); return o }

	tests := []struct {
		name string
		url  string
		opts safefetch.Options
		code errcode.Code // "" means success
		msg  string       // the body, or a substring of the error
	}{
		{"tls on loopback with opt-in", tlsSrv.URL + "/doc", base, "", "accept=application/json"},
		{"plain http with opt-in", plainSrv.URL + "/doc", with(func(o *safefetch.Options) { o.AllowInsecure = true }), "", "accept=application/json"},
		{"plain http refused, hinted", plainSrv.URL + "/doc", with(func(o *safefetch.Options) { o.InsecureHint = "use --insecure" }), errcode.InvalidRequest, "plain http is refused (use --insecure)"},
		{"loopback refused, hinted", tlsSrv.URL + "/doc", with(func(o *safefetch.Options) { o.AllowPrivate = false; o.PrivateHint = "use --private" }), errcode.InvalidRequest, "is a loopback address (use --private)"},
		{"scheme refused", "ftp://example.com/x", base, errcode.InvalidRequest, `scheme "ftp" is refused`},
		{"no host", "https:///x", base, errcode.InvalidRequest, "no host"},
		{"credentials refused", strings.Replace(tlsSrv.URL, "https://", "https://u:p@", 1), base, errcode.InvalidRequest, "credentials"},
		{"redirect refused", tlsSrv.URL + "/redirect", base, errcode.InvalidRequest, `redirect (HTTP 302 to "/doc") refused`},
		{"HTTP error", tlsSrv.URL + "/missing", base, errcode.InvalidRequest, "HTTP 404"},
		{"declared body over the limit", tlsSrv.URL + "/big", base, errcode.LimitExceeded, "body of 101 bytes is over the 100-byte limit"},
		{"chunked body over the limit", tlsSrv.URL + "/big-chunked", base, errcode.LimitExceeded, "body is over the 100-byte limit"},
		{"untrusted certificate", tlsSrv.URL + "/doc", with(func(o *safefetch.Options) { o.RootCAs = nil }), errcode.InvalidRequest, "certificate"},
		{"slow server", tlsSrv.URL + "/slow", with(func(o *safefetch.Options) { o.Timeout = 200 * time.Millisecond }), errcode.Timeout, "no answer within 200ms"},
		{"no limit given", tlsSrv.URL + "/doc", with(func(o *safefetch.Options) { o.MaxBytes = 0 }), errcode.Internal, "MaxBytes 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := safefetch.Get(context.Background(), tt.url, tt.opts)
			if tt.code == "" {
				if err != nil || string(body) != tt.msg {
					t.Fatalf("got %q, %v; want %q", body, err, tt.msg)
				}
				return
			}
			if err == nil || errcode.Of(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %q, error %v (code %s); want %s containing %q", body, err, errcode.Of(err), tt.code, tt.msg)
			}
		})
	}
}

func TestGetRefusedAddressIsTyped(t *testing.T) {
	srv := httptest.NewTLSServer(server())
	defer srv.Close()
	_, err := safefetch.Get(context.Background(), srv.URL+"/doc", safefetch.Options{MaxBytes: 100})
	if !errors.Is(err, safefetch.ErrRefusedAddress) || !strings.HasSuffix(err.Error(), "is a loopback address") {
		t.Fatalf("error %v: want ErrRefusedAddress without a hint", err)
	}
}

func TestGetCancelled(t *testing.T) {
	srv := httptest.NewTLSServer(server())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := safefetch.Get(ctx, srv.URL+"/slow", safefetch.Options{AllowPrivate: true, MaxBytes: 100, Timeout: time.Minute,
		RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
	if errcode.Of(err) != errcode.Cancelled {
		t.Fatalf("error %v (code %s), want cancelled", err, errcode.Of(err))
	}
}

// TestErrorDoesNotNameURL: a fetch error does not name the URL (its query may hold a
// secret): callers say what they fetched.
func TestErrorDoesNotNameURL(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	u := srv.URL + "/jwks?access_token=s3cr3t-value"
	_, err := safefetch.Get(context.Background(), u, safefetch.Options{MaxBytes: 100, Timeout: time.Minute})
	if err == nil {
		t.Fatal("loopback accepted")
	}
	if strings.Contains(err.Error(), "s3cr3t-value") || strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("error names the URL: %v", err)
	}
}

// TestRedirectLocationBounded: a refused redirect quotes at most errcode.MaxQuoted bytes of
// its Location, with its length; headers beyond MaxHeaderBytes are refused outright. A key
// server is untrusted (security-model.md): its answer's size is bounded, not only its
// body's, and the error verify_schema returns and the log writes stays small.
func TestRedirectLocationBounded(t *testing.T) {
	fetch := func(loc string) error {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", loc)
			w.WriteHeader(http.StatusFound)
		}))
		defer srv.Close()
		_, err := safefetch.Get(context.Background(), srv.URL+"/key", safefetch.Options{
			AllowInsecure: true, AllowPrivate: true, MaxBytes: 64 << 10, Timeout: time.Minute,
		})
		return err
	}
	loc := "https://elsewhere.example/" + strings.Repeat("a", 32<<10)
	err := fetch(loc)
	if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "redirect") {
		t.Fatalf("err = %.300v, want a refused redirect", err)
	}
	if n := len(err.Error()); n > 1<<10 || !strings.Contains(err.Error(), fmt.Sprintf("(%d bytes in all)", len(loc))) {
		t.Errorf("the refused redirect's error is %d bytes, its Location not quoted bounded: %.400s", n, err.Error())
	}
	err = fetch("https://elsewhere.example/" + strings.Repeat("a", 1<<20))
	if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "headers exceeded") || len(err.Error()) > 1<<10 {
		t.Fatalf("a 1 MiB header: err = %.300v, want the headers refused", err)
	}
}

// rawServer answers every request on a loopback listener with the bytes answer, whatever
// they are: a server that does not speak HTTP as net/http's does.
func rawServer(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				c.Write([]byte(answer))
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/key"
}

// TestMalformedAnswerErrorBounded: net/http quotes a malformed status or header line
// whole in its error; a fetch's error carries at most MaxCauseBytes of it, with its
// length — the server chose those bytes, and the error reaches verify_schema's caller and
// the log.
func TestMalformedAnswerErrorBounded(t *testing.T) {
	for name, answer := range map[string]string{
		"header line without colon": "HTTP/1.1 200 OK\r\n" + strings.Repeat("b", 60000) + "\r\nContent-Length: 2\r\n\r\nok",
		"not HTTP":                  strings.Repeat("c", 60000) + "\r\n\r\n",
		"bad Content-Length":        "HTTP/1.1 200 OK\r\nContent-Length: " + strings.Repeat("9", 60000) + "\r\n\r\nok",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := safefetch.Get(context.Background(), rawServer(t, answer), safefetch.Options{AllowPrivate: true, AllowInsecure: true, MaxBytes: 64 << 10, Timeout: time.Minute})
			if errcode.Of(err) != errcode.InvalidRequest {
				t.Fatalf("err = %.300v, want invalid_request", err)
			}
			if n := len(err.Error()); n > safefetch.MaxCauseBytes+256 || !strings.Contains(err.Error(), "bytes in all)") {
				t.Errorf("error is %d bytes, the server's text not cut with its length: %.300s…", n, err.Error())
			}
		})
	}
}
