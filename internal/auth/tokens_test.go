package auth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"symbi/internal/errcode"
	"sync"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"symbi/internal/auth"
)

const (
	hashA = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	hashB = "sha256:" + "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func TestParseTokens(t *testing.T) {
	good := []struct {
		name string
		text string
		n    int
	}{
		{"one", "alice " + hashA + "\n", 1},
		{"no final newline", "alice " + hashA, 1},
		{"comments and blanks", "# operators\n\n   \n\t# indented comment\nalice " + hashA + "\n\nauth0|abc123 " + hashB + "\n", 2},
		{"email and pipe ids", "alice@example.com " + hashA + "\nauth0|x " + hashB + "\n", 2},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := auth.ParseTokens([]byte(tt.text))
			if err != nil || tok.Len() != tt.n {
				t.Fatalf("got %v, %v; want %d tokens", tok, err, tt.n)
			}
		})
	}

	bad := []struct {
		name string
		text string
		line int    // 0: no LineError
		msg  string // substring of the error
	}{
		{"empty file", "", 0, "no token"},
		{"only comments", "# nothing\n\n", 0, "no token"},
		{"carriage return", "alice " + hashA + "\r\n", 1, "carriage return"},
		{"one field", "# c\nalice\n", 2, "separated by one space"},
		{"two spaces", "alice  " + hashA + "\n", 1, "separated by one space"},
		{"tab separator", "alice\t" + hashA + "\n", 1, "separated by one space"},
		{"trailing space", "alice " + hashA + " \n", 1, "separated by one space"},
		{"three fields", "alice " + hashA + " extra\n", 1, "separated by one space"},
		{"leading space", " alice " + hashA + "\n", 1, "separated by one space"},
		{"leading space, one field", " alice\n", 1, "is not a caller id"},
		{"quote in id", `al"ice ` + hashA + "\n", 1, "is not a caller id"},
		{"backslash in id", `al\ice ` + hashA + "\n", 1, "is not a caller id"},
		{"leading dash", "-alice " + hashA + "\n", 1, "is not a caller id"},
		{"non-ASCII id", "alïce " + hashA + "\n", 1, "is not a caller id"},
		{"control in id", "al\x01ice " + hashA + "\n", 1, "is not a caller id"},
		{"long id", strings.Repeat("a", 129) + " " + hashA + "\n", 1, "is not a caller id"},
		{"reserved id", "stdio " + hashA + "\n", 1, `"stdio" is a reserved caller id`},
		{"reserved anonymous", "anonymous " + hashA + "\n", 1, "reserved"},
		{"no prefix", "alice " + hashA[7:] + "\n", 1, `must start with "sha256:"`},
		{"other algorithm", "alice sha512:" + hashA[7:] + "\n", 1, `must start with "sha256:"`},
		{"uppercase hex", "alice " + strings.ToUpper(hashA[:8]) + hashA[8:] + "\n", 1, "must start with"},
		{"uppercase digits", "alice sha256:" + strings.ToUpper(hashA[7:]) + "\n", 1, "64 lowercase hex"},
		{"short hash", "alice " + hashA[:70] + "\n", 1, "64 lowercase hex"},
		{"long hash", "alice " + hashA + "0\n", 1, "64 lowercase hex"},
		{"not hex", "alice " + hashA[:70] + "zz\n", 1, "64 lowercase hex"},
		{"empty hash", "alice \n", 1, `must start with "sha256:"`},
		{"duplicate id", "alice " + hashA + "\n# x\nalice " + hashB + "\n", 3, `caller id "alice" is already on line 1`},
		{"duplicate hash", "alice " + hashA + "\nbob " + hashA + "\n", 2, "the hash is already on line 1"},
		{"too big", strings.Repeat("#\n", auth.MaxTokenFileBytes/2+1), 0, "more than"},
		{"too many", manyTokens(auth.MaxTokens + 1), auth.MaxTokens + 1, "more than 4096 tokens"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := auth.ParseTokens([]byte(tt.text))
			if err == nil {
				t.Fatalf("accepted: %d tokens", tok.Len())
			}
			if !errors.Is(err, auth.ErrInvalidTokenFile) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q: want ErrInvalidTokenFile containing %q", err, tt.msg)
			}
			var le *auth.LineError
			if got := errors.As(err, &le); got != (tt.line != 0) || (got && le.Line != tt.line) {
				t.Fatalf("error %q: LineError %v, want line %d", err, le, tt.line)
			}
		})
	}
}

// manyTokens is a token file of n entries.
func manyTokens(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "c%d sha256:%064x\n", i, i)
	}
	return b.String()
}

func TestValidCallerID(t *testing.T) {
	for _, id := range []string{"a", "alice", "ci-bot", "auth0|abc123", "alice@example.com", "248289761001",
		"CgNsZG=+/x", "stdio", "x#y", strings.Repeat("z", 128)} {
		if !auth.ValidCallerID(id) {
			t.Errorf("ValidCallerID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "a b", "-x", "#x", "a'b", "a`b", `a"b`, `a\b`, "é", "a\x7f", "a\tb", "a\n", strings.Repeat("z", 129)} {
		if auth.ValidCallerID(id) {
			t.Errorf("ValidCallerID(%q) = true", id)
		}
	}
	if !auth.Reserved("stdio") || !auth.Reserved("anonymous") || auth.Reserved("alice") {
		t.Error("Reserved")
	}
}

// fixedRandom returns a reader of the bytes b, b+1, ... (mod 256).
func fixedRandom(b byte) *bytes.Reader {
	buf := make([]byte, 64)
	for i := range buf {
		buf[i] = b + byte(i)
	}
	return bytes.NewReader(buf)
}

func TestAddLoadVerify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	alice, err := auth.AddToken(path, "alice", fixedRandom(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "symbi_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"; alice != want {
		t.Fatalf("token %q, want %q", alice, want)
	}
	bob, err := auth.AddToken(path, "auth0|bob", fixedRandom(100), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", st.Mode(), err)
	}
	data, _ := os.ReadFile(path)
	if bytes.Contains(data, []byte(alice)) || bytes.Contains(data, []byte(bob[len(auth.TokenPrefix):])) {
		t.Fatalf("the file holds a token in clear:\n%s", data)
	}
	if lines := strings.Split(string(data), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "alice sha256:") || !strings.HasPrefix(lines[1], "auth0|bob sha256:") {
		t.Fatalf("file:\n%s", data)
	}

	tok, err := auth.LoadTokens(path)
	if err != nil || tok.Len() != 2 {
		t.Fatalf("LoadTokens: %v, %v", tok, err)
	}
	for token, want := range map[string]string{alice: "alice", bob: "auth0|bob"} {
		before := time.Now()
		ti, err := tok.Verify(context.Background(), token, nil)
		if err != nil {
			t.Fatalf("Verify(%s): %v", want, err)
		}
		c, ok := auth.FromTokenInfo(ti)
		if !ok || c != (auth.Caller{ID: want, Method: auth.MethodToken}) {
			t.Fatalf("caller %+v, %v; want %s by token", c, ok, want)
		}
		if ti.Expiration.Before(before.Add(auth.StaticTokenLifetime)) || ti.Expiration.After(time.Now().Add(auth.StaticTokenLifetime)) {
			t.Fatalf("expiration %v, want an hour from now", ti.Expiration)
		}
	}
	for _, token := range []string{"", "alice", alice + "x", alice[:len(alice)-1], strings.ToUpper(alice), hashA} {
		ti, err := tok.Verify(context.Background(), token, nil)
		if !errors.Is(err, sdkauth.ErrInvalidToken) || !errors.Is(err, auth.ErrUnknownToken) || ti != nil {
			t.Fatalf("Verify(%q) = %v, %v; want an unknown token", token, ti, err)
		}
	}

	// Refusals leave the file as it was.
	refusals := []struct {
		name, msg string
	}{
		{"alice", `caller id "alice" already has a token`},
		{"stdio", "reserved"},
		{"a b", "is not a caller id"},
		{"", "is not a caller id"},
	}
	for _, r := range refusals {
		if _, err := auth.AddToken(path, r.name, fixedRandom(7), nil); err == nil || !strings.Contains(err.Error(), r.msg) {
			t.Errorf("AddToken(%q): error %v, want %q", r.name, err, r.msg)
		}
	}
	if _, err := auth.AddToken(path, "carol", bytes.NewReader(make([]byte, 31)), nil); err == nil || !strings.Contains(err.Error(), "random") {
		t.Errorf("AddToken with a short random source: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Fatalf("a refused add changed the file:\n%s", after)
	}
}

func TestAddTokenToExistingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	os.WriteFile(path, []byte("# ops\nalice "+hashA), 0o600) // no final newline
	if _, err := auth.AddToken(path, "bob", fixedRandom(1), nil); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# ops\nalice "+hashA+"\nbob sha256:") || !strings.HasSuffix(string(data), "\n") {
		t.Fatalf("file:\n%s", data)
	}
	// A malformed file is not appended to.
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("alice sha256:00\n"), 0o600)
	if _, err := auth.AddToken(bad, "bob", fixedRandom(1), nil); !errors.Is(err, auth.ErrInvalidTokenFile) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("AddToken to a malformed file: %v", err)
	}
}

func TestTokenFileRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if _, err := auth.AddToken(good, "alice", fixedRandom(0), nil); err != nil {
		t.Fatal(err)
	}
	groupWritable := filepath.Join(dir, "group")
	os.WriteFile(groupWritable, []byte("alice "+hashA+"\n"), 0o600)
	os.Chmod(groupWritable, 0o620)
	otherWritable := filepath.Join(dir, "other")
	os.WriteFile(otherWritable, []byte("alice "+hashA+"\n"), 0o600)
	os.Chmod(otherWritable, 0o602)
	link := filepath.Join(dir, "link")
	os.Symlink(good, link)
	tests := []struct {
		name, path, msg string
	}{
		{"group writable", groupWritable, "mode 0620 lets group or others write it"},
		{"other writable", otherWritable, "mode 0602 lets group or others write it"},
		{"symbolic link", link, "too many levels of symbolic links"},
		{"directory", dir, ""}, // "not a regular file" to read, EISDIR to write
		{"missing", filepath.Join(dir, "missing"), "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := auth.LoadTokens(tt.path); !errors.Is(err, auth.ErrInvalidTokenFile) || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("LoadTokens: error %v, want one naming the file and %q", err, tt.msg)
			}
			if tt.name == "missing" {
				return // AddToken creates it
			}
			if _, err := auth.AddToken(tt.path, "bob", fixedRandom(1), nil); !errors.Is(err, auth.ErrInvalidTokenFile) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("AddToken: error %v, want %q", err, tt.msg)
			}
		})
	}
	// A file others may read is fine: it holds hashes only.
	os.Chmod(good, 0o644)
	if _, err := auth.LoadTokens(good); err != nil {
		t.Fatalf("a 0644 file: %v", err)
	}
}

// TestAddTokenConcurrent: adds that race each get their own line.
func TestAddTokenConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = auth.AddToken(path, fmt.Sprintf("c%d", i), fixedRandom(byte(i)), nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if tok, err := auth.LoadTokens(path); err != nil || tok.Len() != n {
		t.Fatalf("LoadTokens: %v, %v; want %d tokens", tok, err, n)
	}
}

func TestFromTokenInfo(t *testing.T) {
	tests := []struct {
		ti *sdkauth.TokenInfo
		ok bool
	}{
		{nil, false},
		{&sdkauth.TokenInfo{UserID: "alice"}, false},
		{&sdkauth.TokenInfo{UserID: "alice", Extra: map[string]any{auth.ExtraMethod: "password"}}, false},
		{&sdkauth.TokenInfo{UserID: "", Extra: map[string]any{auth.ExtraMethod: auth.MethodJWT}}, false},
		{&sdkauth.TokenInfo{UserID: "a b", Extra: map[string]any{auth.ExtraMethod: auth.MethodJWT}}, false},
		{&sdkauth.TokenInfo{UserID: "alice", Extra: map[string]any{auth.ExtraMethod: auth.MethodJWT}}, true},
	}
	for i, tt := range tests {
		if c, ok := auth.FromTokenInfo(tt.ti); ok != tt.ok || (ok && c != (auth.Caller{ID: "alice", Method: auth.MethodJWT})) {
			t.Errorf("%d: got %+v, %v; want ok=%v", i, c, ok, tt.ok)
		}
	}
}

// TestTokenFileLimitsAreLimitExceeded: a token file past its limits (1 MiB, 4,096 tokens)
// is refused by LoadTokens — what `symbi mcp --auth-tokens` reads — with limit_exceeded,
// the code `symbi token add` gives the same limits (README, Limits).
func TestTokenFileLimitsAreLimitExceeded(t *testing.T) {
	dir := t.TempDir()
	var many strings.Builder
	for i := 0; i <= auth.MaxTokens; i++ { // MaxTokens+1 entries
		fmt.Fprintf(&many, "u%d sha256:%x\n", i, sha256.Sum256([]byte(fmt.Sprint(i))))
	}
	tooMany := filepath.Join(dir, "too-many")
	tooBig := filepath.Join(dir, "too-big")
	if err := os.WriteFile(tooMany, []byte(many.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	big := fmt.Sprintf("u sha256:%x\n", sha256.Sum256([]byte("u"))) + strings.Repeat("#\n", auth.MaxTokenFileBytes/2)
	if err := os.WriteFile(tooBig, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{tooMany, tooBig} {
		_, err := auth.LoadTokens(path)
		if err == nil {
			t.Fatalf("%s: loaded a token file past the limits", filepath.Base(path))
		}
		if code := errcode.Of(err); code != errcode.LimitExceeded {
			t.Errorf("%s: LoadTokens refused it with %s (%v); want limit_exceeded, as the README's Limits table says and as symbi token add reports the same limit", filepath.Base(path), code, err)
		}
	}
}

// TestAddTokenNotDelivered: a token whose delivery fails is not added: its entry is cut
// off again, the entries before it kept, and the name is free.
func TestAddTokenNotDelivered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if _, err := auth.AddToken(path, "alice", fixedRandom(0), nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	_, err := auth.AddToken(path, "bob", fixedRandom(1), func(string) error { return errors.New("stdout is full") })
	if !errors.Is(err, auth.ErrNotDelivered) || !strings.Contains(err.Error(), "stdout is full") {
		t.Fatalf("AddToken with a failed delivery: %v, want ErrNotDelivered saying why", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatalf("the token file after a failed delivery: %q, want it as before: %q", after, before)
	}
	if _, err := auth.AddToken(path, "bob", fixedRandom(2), nil); err != nil {
		t.Fatalf("bob's name after a failed delivery: %v", err)
	}
}
