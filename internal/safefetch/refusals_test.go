package safefetch

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"symbi/internal/errcode"
)

// TestSpecialRangeBounds: each special-purpose range is refused without the opt-in over
// its whole extent, first and last address, and the addresses just outside it are not.
func TestSpecialRangeBounds(t *testing.T) {
	refused := map[string]string{
		"100.64.0.0":                             "carrier-grade NAT",
		"100.127.255.255":                        "carrier-grade NAT",
		"192.0.0.0":                              "IETF protocol assignments",
		"192.0.0.255":                            "IETF protocol assignments",
		"198.18.0.0":                             "benchmarking",
		"198.19.255.255":                         "benchmarking",
		"240.0.0.0":                              "reserved",
		"248.0.0.1":                              "reserved",
		"255.255.255.254":                        "reserved",
		"192.0.2.0":                              "documentation",
		"192.0.2.255":                            "documentation",
		"198.51.100.0":                           "documentation",
		"198.51.100.255":                         "documentation",
		"203.0.113.0":                            "documentation",
		"203.0.113.255":                          "documentation",
		"192.88.99.0":                            "6to4 relay anycast",
		"192.88.99.255":                          "6to4 relay anycast",
		"100::":                                  "discard-only",
		"100::ffff:ffff:ffff:ffff":               "discard-only",
		"2001::":                                 "IETF protocol assignments",
		"2001:0:4136:e378:8000:63bf:3fff:fdd2":   "IETF protocol assignments", // Teredo
		"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff": "IETF protocol assignments",
		"2001:db8::":                             "documentation",
		"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff": "documentation",
		"3fff::":                                 "documentation",
		"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff": "documentation",
	}
	for a, what := range refused {
		err := checkAddr(netip.MustParseAddr(a), false, "")
		if !errors.Is(err, ErrRefusedAddress) || !strings.Contains(err.Error(), "is a "+what+" address") {
			t.Errorf("%s: error %v, want refused as %s", a, err, what)
		}
		if err := checkAddr(netip.MustParseAddr(a), true, ""); err != nil {
			t.Errorf("%s with the opt-in: refused: %v", a, err)
		}
	}
	for _, a := range []string{"100.63.255.255", "100.128.0.0", "191.255.255.255", "192.0.1.0", "198.17.255.255", "198.20.0.0", "223.255.255.255",
		"192.0.1.255", "192.0.3.0", "198.51.99.255", "198.51.101.0", "203.0.112.255", "203.0.114.0", "192.88.98.255", "192.88.100.0",
		"100:0:0:1::", "ff::ffff", "2001:200::", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::", "3ffe:ffff::", "3fff:1000::", "2606:4700::1111"} {
		if err := checkAddr(netip.MustParseAddr(a), false, ""); err != nil {
			t.Errorf("%s (public): refused: %v", a, err)
		}
	}
}

// TestDefaultTimeout: a Timeout of zero or less means DefaultTimeout (10 s) — the
// exchange is never unbounded. (The context's deadline has passed: the fetch ends at once
// and its error names the timeout it was given.)
func TestDefaultTimeout(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	for _, timeout := range []time.Duration{0, -time.Second} {
		_, err := Get(ctx, srv.URL+"/k", Options{AllowPrivate: true, MaxBytes: 100, Timeout: timeout,
			RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
		if errcode.Of(err) != errcode.Timeout || !strings.Contains(err.Error(), "no answer within 10s") {
			t.Errorf("Timeout %v: error %v (code %s), want timeout naming 10s", timeout, err, errcode.Of(err))
		}
	}
}

// TestNoProxyFromEnvironment: the HTTPS_PROXY family of variables is ignored — the
// connection checked is the one to the URL's host, never a proxy's. (Run in a child
// process: net/http reads those variables once per process.)
func TestNoProxyFromEnvironment(t *testing.T) {
	if os.Getenv("SYMBI_TEST_SAFEFETCH_PROXY_CHILD") == "1" {
		_, err := Get(context.Background(), "https://10.0.0.1/key", Options{MaxBytes: 100, Timeout: time.Minute})
		if !errors.Is(err, ErrRefusedAddress) || !strings.Contains(err.Error(), "10.0.0.1 is a private address") {
			t.Fatalf("error %v, want the URL's own address 10.0.0.1 refused (no proxy)", err)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoProxyFromEnvironment$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SYMBI_TEST_SAFEFETCH_PROXY_CHILD=1",
		"HTTPS_PROXY=http://127.0.0.1:9", "https_proxy=http://127.0.0.1:9",
		"HTTP_PROXY=http://127.0.0.1:9", "http_proxy=http://127.0.0.1:9",
		"ALL_PROXY=http://127.0.0.1:9", "NO_PROXY=", "no_proxy=", "REQUEST_METHOD=")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestTLS12Minimum: a server that speaks at most TLS 1.1 is refused.
func TestTLS12Minimum(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("key")) }))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
	srv.StartTLS()
	defer srv.Close()
	body, err := Get(context.Background(), srv.URL+"/k", Options{AllowPrivate: true, MaxBytes: 100, Timeout: time.Minute,
		RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
	if errcode.Of(err) != errcode.InvalidRequest || body != nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("TLS 1.1 server: body %q, error %v; want invalid_request, no common protocol version", body, err)
	}
}

// plainGet fetches path from a plain-http loopback server running h, with both opt-ins.
func plainGet(t *testing.T, h http.HandlerFunc, maxBytes int64) ([]byte, error) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return Get(context.Background(), srv.URL+"/k", Options{AllowInsecure: true, AllowPrivate: true, MaxBytes: maxBytes, Timeout: time.Minute})
}

// TestHeaderLimit: an answer's headers are bounded at MaxHeaderBytes (64 KiB): headers of
// 60 KiB are read, headers of 68 KiB are refused.
func TestHeaderLimit(t *testing.T) {
	pad := func(n int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Pad", strings.Repeat("p", n))
			w.Write([]byte("ok"))
		}
	}
	if body, err := plainGet(t, pad(60<<10), 100); err != nil || string(body) != "ok" {
		t.Fatalf("60 KiB of headers: %q, %v; want the body", body, err)
	}
	_, err := plainGet(t, pad(68<<10), 100)
	if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "headers exceeded") {
		t.Fatalf("68 KiB of headers: error %v, want refused", err)
	}
}

// TestRedirectRange: every 3xx answer, 300 and 399 included, is a refused redirect naming
// its Location; a 400 is an HTTP error.
func TestRedirectRange(t *testing.T) {
	for _, code := range []int{300, 399, 400} {
		_, err := plainGet(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(code)
		}, 100)
		want := "redirect (HTTP " + strconv.Itoa(code) + ` to "/elsewhere") refused`
		if code == 400 {
			want = "HTTP 400"
		}
		if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), want) || code == 400 && strings.Contains(err.Error(), "redirect") {
			t.Errorf("HTTP %d: error %v, want invalid_request containing %q", code, err, want)
		}
	}
}

// TestOnly200: only HTTP 200 is a success; another 2xx answer, with a body, is refused.
func TestOnly200(t *testing.T) {
	for _, code := range []int{201, 202, 203, 204, 206} {
		body, err := plainGet(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			w.Write([]byte("key"))
		}, 100)
		if errcode.Of(err) != errcode.InvalidRequest || !strings.Contains(err.Error(), "HTTP "+strconv.Itoa(code)) || body != nil {
			t.Errorf("HTTP %d: body %q, error %v; want refused", code, body, err)
		}
	}
}

// TestBodyLimitExact: a body of exactly MaxBytes is accepted, declared or chunked.
func TestBodyLimitExact(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"declared": func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 100)) },
		"chunked": func(w http.ResponseWriter, r *http.Request) {
			for range 10 {
				w.Write(make([]byte, 10))
				w.(http.Flusher).Flush()
			}
		},
	} {
		body, err := plainGet(t, h, 100)
		if err != nil || len(body) != 100 {
			t.Errorf("%s body of exactly 100 bytes, limit 100: %d bytes, %v", name, len(body), err)
		}
	}
}

// rawAnswer serves one connection on loopback: it reads the request's head, writes answer
// and closes the connection.
func rawAnswer(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 0, 4096)
		tmp := make([]byte, 4096)
		for !strings.Contains(string(buf), "\r\n\r\n") {
			n, err := c.Read(tmp)
			buf = append(buf, tmp[:n]...)
			if err != nil {
				return
			}
		}
		c.Write([]byte(answer))
	}()
	return "http://" + ln.Addr().String() + "/key"
}

// TestTruncatedBodyRefused: a body that ends before its declared length is an error, not
// a shorter document.
func TestTruncatedBodyRefused(t *testing.T) {
	u := rawAnswer(t, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"+strings.Repeat("k", 50))
	body, err := Get(context.Background(), u, Options{AllowInsecure: true, AllowPrivate: true, MaxBytes: 1000, Timeout: time.Minute})
	if err == nil || body != nil || errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("50 of 100 declared bytes: body %q, error %v; want invalid_request", body, err)
	}
}

// TestCauseClippedAt512: of a transport error's text the fetch keeps exactly the first
// 512 bytes, and its length.
func TestCauseClippedAt512(t *testing.T) {
	const n = 60000
	u := rawAnswer(t, "HTTP/1.1 200 OK\r\n"+strings.Repeat("b", n)+"\r\nContent-Length: 2\r\n\r\nok")
	_, err := Get(context.Background(), u, Options{AllowInsecure: true, AllowPrivate: true, MaxBytes: 100, Timeout: time.Minute})
	if errcode.Of(err) != errcode.InvalidRequest {
		t.Fatalf("a malformed header line: error %v, want invalid_request", err)
	}
	// The error is the transport's text (which quotes the whole line), cut: its first
	// bytes, then "…(<length> bytes in all)".
	msg := err.Error()
	m := regexp.MustCompile(`^(.*b)…\((\d+) bytes in all\)$`).FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("error %.600q: not the cut text of the transport's error", msg)
	}
	if total, _ := strconv.Atoi(m[2]); len(m[1]) != 512 || total <= n {
		t.Fatalf("error %.600q: kept %d of %s bytes, want 512 of more than %d", msg, len(m[1]), m[2], n)
	}
}
