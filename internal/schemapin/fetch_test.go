package schemapin_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"symbi/internal/errcode"
	"symbi/internal/schemapin"
)

// keyServer serves the vector key files plus misbehaving paths.
func keyServer(t *testing.T) http.Handler {
	t.Helper()
	pem := readVector(t, "signer.pub.pem")
	mux := http.NewServeMux()
	mux.HandleFunc("/key.pem", func(w http.ResponseWriter, _ *http.Request) { w.Write(pem) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/key.pem", http.StatusFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(strings.Repeat(" ", schemapin.MaxKeyDocBytes+1)))
	})
	mux.HandleFunc("/big-chunked", func(w http.ResponseWriter, _ *http.Request) {
		chunk := []byte(strings.Repeat(" ", 4096))
		for range schemapin.MaxKeyDocBytes/4096 + 1 {
			w.Write(chunk)
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

func TestFetch(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(keyServer(t))
	defer tlsSrv.Close()
	plainSrv := httptest.NewServer(keyServer(t))
	defer plainSrv.Close()
	roots := tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	schema := string(readVector(t, "schema.signed.json"))

	private := map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}
	both := map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1", "SYMBI_SCHEMAPIN_ALLOW_INSECURE": "1"}
	tests := []struct {
		name string
		env  map[string]string
		url  string
		code errcode.Code // "" means verified
		msg  string
	}{
		{"tls with loopback opt-in", private, tlsSrv.URL + "/key.pem", "", ""},
		{"plain http with both opt-ins", both, plainSrv.URL + "/key.pem", "", ""},
		{"plain http refused", private, plainSrv.URL + "/key.pem", errcode.InvalidRequest, "plain http is refused"},
		{"other scheme refused", both, "file:///etc/passwd", errcode.InvalidRequest, `scheme "file" is refused`},
		{"credentials refused", private, strings.Replace(tlsSrv.URL, "https://", "https://u:p@", 1) + "/key.pem", errcode.InvalidRequest, "credentials"},
		{"loopback without opt-in", nil, tlsSrv.URL + "/key.pem", errcode.InvalidRequest, "is a loopback address"},
		{"loopback by name without opt-in", nil, strings.Replace(tlsSrv.URL, "127.0.0.1", "localhost", 1) + "/key.pem", errcode.InvalidRequest, "is a loopback address"},
		{"redirect refused", private, tlsSrv.URL + "/redirect", errcode.InvalidRequest, "redirect (HTTP 302"},
		{"body over 64 KiB", private, tlsSrv.URL + "/big", errcode.LimitExceeded, "over the 65536-byte limit"},
		{"chunked body over 64 KiB", private, tlsSrv.URL + "/big-chunked", errcode.LimitExceeded, "over the 65536-byte limit"},
		{"slow server", private, tlsSrv.URL + "/slow", errcode.Timeout, "no answer within 300ms"},
		{"HTTP error", private, tlsSrv.URL + "/missing", errcode.InvalidRequest, "HTTP 404"},
		{"untrusted certificate", map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1", "no-roots": "1"}, tlsSrv.URL + "/key.pem", errcode.InvalidRequest, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := schemapin.NewVerifier(env(tt.env))
			// Only the slow server's case is about the timeout, and that server never
			// answers; every other case gets a timeout no busy machine reaches.
			v.Timeout = time.Minute
			if tt.code == errcode.Timeout {
				v.Timeout = 300 * time.Millisecond
			}
			if tt.env["no-roots"] == "" {
				v.RootCAs = roots
			}
			done := make(chan struct{})
			var res *schemapin.Result
			var err error
			go func() {
				defer close(done)
				res, err = v.Verify(context.Background(), schemapin.Request{Schema: schema, PublicKeyURL: tt.url})
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				t.Fatal("Verify hung")
			}
			if tt.code == "" {
				if err != nil || !res.Verified {
					t.Fatalf("got %+v, %v; want verified", res, err)
				}
				return
			}
			if err == nil || !errors.Is(err, tt.code) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %+v, error %v; want %s containing %q", res, err, tt.code, tt.msg)
			}
		})
	}
}

func TestFetchCancelled(t *testing.T) {
	srv := httptest.NewTLSServer(keyServer(t))
	defer srv.Close()
	v := schemapin.NewVerifier(env(map[string]string{"SYMBI_SCHEMAPIN_ALLOW_PRIVATE": "1"}))
	v.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := v.Verify(ctx, schemapin.Request{Schema: `{}`, PublicKeyURL: srv.URL + "/slow"})
	if !errors.Is(err, errcode.Cancelled) {
		t.Fatalf("error %v (code %s), want cancelled", err, errcode.Of(err))
	}
}

// TestKeyURLParseErrorDoesNotNameURL: a malformed key URL is refused without the
// error repeating it (its query may hold a secret).
// docs/schemapin.md "Fetching a key URL safely": the fetch "names no URL in its errors (a
// query may hold a secret) but a refused redirect's Location; the caller says what it
// fetched."
func TestKeyURLParseErrorDoesNotNameURL(t *testing.T) {
	v := schemapin.NewVerifier(func(string) string { return "" })
	_, err := v.Verify(context.Background(), schemapin.Request{Schema: `{}`, PublicKeyURL: "https://keys.example.com/%zz/k.pem?token=s3cr3t-value"})
	if err == nil {
		t.Fatal("malformed URL accepted")
	}
	if strings.Contains(err.Error(), "s3cr3t-value") {
		t.Fatalf("error names the key URL and its secret: %v", err)
	}
}
