package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
	"symbi/internal/opfile"
)

// Limits and forms of the token file.
const (
	MaxTokenFileBytes   = 1 << 20
	MaxTokens           = 4096
	TokenPrefix         = "symbi_"
	StaticTokenLifetime = time.Hour // the Expiration a static token's TokenInfo carries
	hashPrefix          = "sha256:"
)

// ErrInvalidTokenFile is wrapped by every refusal of a token file.
var ErrInvalidTokenFile = errors.New("invalid token file")

// LineError is a malformed line of a token file.
type LineError struct {
	Line int    // 1-based
	Msg  string // what is wrong with it
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// Tokens is a loaded token file: the hashes of the tokens that authenticate, with their
// callers.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	id   string
	hash [sha256.Size]byte
}

// Len returns the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// LoadTokens reads and checks the token file at path (see the package comment).
func LoadTokens(path string) (*Tokens, error) {
	f, err := openTokenFile(path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := readTokenFile(f)
	if err != nil {
		return nil, fileError(path, err)
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fileError(path, err)
	}
	return t, nil
}

// ParseTokens checks the text of a token file, which must hold at least one entry.
func ParseTokens(data []byte) (*Tokens, error) {
	t, err := parseTokens(data)
	if err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, tokenFileError(errors.New("no token (add one with symbi token add)"))
	}
	return t, nil
}

// parseTokens checks the text of a token file, which may hold no entry.
func parseTokens(data []byte) (*Tokens, error) {
	if len(data) > MaxTokenFileBytes {
		return nil, tokenFileError(fmt.Errorf("%d bytes, more than %d", len(data), MaxTokenFileBytes))
	}
	t := &Tokens{}
	idLine := map[string]int{}
	hashLine := map[[sha256.Size]byte]int{}
	text := string(data)
	for n := 1; text != ""; n++ {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		e, skip, msg := parseTokenLine(line)
		switch {
		case msg != "":
			return nil, tokenFileError(&LineError{Line: n, Msg: msg})
		case skip:
			continue
		case idLine[e.id] != 0:
			return nil, tokenFileError(&LineError{Line: n, Msg: fmt.Sprintf("caller id %q is already on line %d", e.id, idLine[e.id])})
		case hashLine[e.hash] != 0:
			return nil, tokenFileError(&LineError{Line: n, Msg: fmt.Sprintf("the hash is already on line %d", hashLine[e.hash])})
		case len(t.entries) == MaxTokens:
			return nil, errcode.Errorf(errcode.LimitExceeded, "%w: %w", ErrInvalidTokenFile, &LineError{Line: n, Msg: fmt.Sprintf("more than %d tokens", MaxTokens)})
		}
		idLine[e.id], hashLine[e.hash] = n, n
		t.entries = append(t.entries, e)
	}
	return t, nil
}

// parseTokenLine parses one line (without its "\n"): an entry, a line to skip, or what is
// wrong with it.
func parseTokenLine(line string) (e tokenEntry, skip bool, msg string) {
	if strings.ContainsRune(line, '\r') {
		return e, false, "carriage return (the file must use \\n line ends)"
	}
	if trimmed := strings.TrimLeft(line, " \t"); trimmed == "" || trimmed[0] == '#' {
		return e, true, ""
	}
	id, hash, ok := strings.Cut(line, " ")
	if !ok || strings.ContainsAny(hash, " \t") {
		return e, false, `want "<caller-id> sha256:<64 lowercase hex digits>", separated by one space`
	}
	if err := checkCallerID(id); err != nil {
		return e, false, err.Error()
	}
	hexHash, ok := strings.CutPrefix(hash, hashPrefix)
	if !ok {
		return e, false, fmt.Sprintf("the hash must start with %q", hashPrefix)
	}
	if len(hexHash) != 2*sha256.Size || strings.ToLower(hexHash) != hexHash {
		return e, false, "the hash must be 64 lowercase hex digits"
	}
	if _, err := hex.Decode(e.hash[:], []byte(hexHash)); err != nil {
		return e, false, "the hash must be 64 lowercase hex digits"
	}
	e.id = id
	return e, false, ""
}

// Verify is a sdkauth.TokenVerifier: it authenticates token against the file's hashes.
// The TokenInfo names the caller, with method MethodToken, and expires
// StaticTokenLifetime from now.
func (t *Tokens) Verify(_ context.Context, token string, _ *http.Request) (*sdkauth.TokenInfo, error) {
	sum := sha256.Sum256([]byte(token))
	match := -1
	// Every entry is compared, in constant time, whatever matches: the time taken
	// does not tell which entry (or whether any) matched.
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(sum[:], t.entries[i].hash[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return nil, refuse(ErrUnknownToken, "no such token")
	}
	return &sdkauth.TokenInfo{
		UserID:     t.entries[match].id,
		Expiration: time.Now().Add(StaticTokenLifetime),
		Extra:      map[string]any{ExtraMethod: MethodToken},
	}, nil
}

// AddToken makes a new token for the caller name, appends its entry to the token file at
// path (created with mode 0600 when absent), syncs it and returns the token. random is
// the source of the token's 32 bytes (crypto/rand.Reader). It refuses an invalid or
// reserved name, a name already in the file, and a file LoadTokens would refuse for
// anything but having no entry. deliver, when set, hands the token over (prints it) once
// its entry is durable, the file still locked: when it fails, the entry is cut off again
// (ErrNotDelivered) — a token no one was given must not hold the name.
func AddToken(path, name string, random io.Reader, deliver func(token string) error) (string, error) {
	if err := checkCallerID(name); err != nil {
		return "", errcode.Errorf(errcode.InvalidRequest, "%v", err)
	}
	f, err := openTokenFile(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// An exclusive lock, so that two concurrent adds cannot both pass the checks.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return "", errcode.Errorf(errcode.Internal, "%s: lock: %v", path, err)
	}
	data, err := readTokenFile(f)
	if err != nil {
		return "", fileError(path, err)
	}
	t, err := parseTokens(data)
	if err != nil {
		return "", fileError(path, err)
	}
	for _, e := range t.entries {
		if e.id == name {
			return "", errcode.Errorf(errcode.InvalidRequest, "%s: caller id %q already has a token (delete its line to replace it)", path, name)
		}
	}
	if len(t.entries) >= MaxTokens {
		return "", errcode.Errorf(errcode.LimitExceeded, "%s: already %d tokens", path, MaxTokens)
	}
	var raw [32]byte
	if _, err := io.ReadFull(random, raw[:]); err != nil {
		return "", errcode.Errorf(errcode.Internal, "random token: %v", err)
	}
	token := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(token))
	var line []byte
	if len(data) > 0 && data[len(data)-1] != '\n' {
		line = append(line, '\n')
	}
	line = fmt.Appendf(line, "%s %s%x\n", name, hashPrefix, sum)
	if len(data)+len(line) > MaxTokenFileBytes {
		return "", errcode.Errorf(errcode.LimitExceeded, "%s: would grow over %d bytes", path, MaxTokenFileBytes)
	}
	// What is written is cut off again when any step after it fails: a partial entry
	// would make the whole file one LoadTokens refuses (the server would not start), and
	// a whole one, not durable or not handed over, a name held by a token no one has.
	cutOff := func(err error) error {
		if terr := f.Truncate(int64(len(data))); terr != nil {
			return errcode.Errorf(errcode.Internal, "%s: %w; and the entry for %q could not be cut off (%v): delete what follows the last whole line", path, err, name, terr)
		}
		if serr := f.Sync(); serr != nil {
			return errcode.Errorf(errcode.Internal, "%s: %w; and the file's sync after cutting the entry for %q off failed (%v)", path, err, name, serr)
		}
		return errcode.Errorf(errcode.Internal, "%s: %w; the entry was cut off again, so no token holds %q", path, err, name)
	}
	if _, err := f.Write(line); err != nil {
		return "", cutOff(err) // names the write and the file
	}
	if err := f.Sync(); err != nil {
		return "", cutOff(fmt.Errorf("sync: %w", err))
	}
	if len(data) == 0 {
		// The file may be new: make its directory entry durable too.
		if err := syncDir(filepath.Dir(path)); err != nil {
			return "", cutOff(fmt.Errorf("sync directory: %w", err))
		}
	}
	if deliver != nil {
		if err := deliver(token); err != nil {
			return "", cutOff(fmt.Errorf("%w: %w", ErrNotDelivered, err))
		}
	}
	return token, nil
}

// ErrNotDelivered is wrapped by AddToken's error when the new token could not be handed
// over: it was not added.
var ErrNotDelivered = errors.New("the new token could not be handed over, so it was not added")

// openTokenFile opens path as an operator file (opfile.Open: no symbolic link, regular,
// not writable by group or others; created 0600 when flags say so).
func openTokenFile(path string, flags int) (*os.File, error) {
	f, err := opfile.Open(path, flags, "it decides who may call the server (chmod go-w)")
	if err != nil {
		return nil, fileError(path, err)
	}
	return f, nil
}

// readTokenFile reads f, at most MaxTokenFileBytes.
func readTokenFile(f *os.File) ([]byte, error) { return opfile.Read(f, MaxTokenFileBytes) }

// syncDir syncs the directory dir.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// tokenFileError marks err as a refusal of a token file.
func tokenFileError(err error) error {
	return errcode.Errorf(errcode.InvalidRequest, "%w: %w", ErrInvalidTokenFile, err)
}

// fileError names path in a refusal of the token file.
func fileError(path string, err error) error {
	code := errcode.InvalidRequest
	switch {
	case errors.Is(err, ErrInvalidTokenFile):
		return fmt.Errorf("%s: %w", path, err)
	case errors.Is(err, opfile.ErrTooLarge):
		code = errcode.LimitExceeded // as symbi token add reports the same limit
	}
	return errcode.Errorf(code, "%s: %w: %w", path, ErrInvalidTokenFile, err)
}
