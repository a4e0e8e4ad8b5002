package mcpserver

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"

	"symbi/internal/auth"
	"symbi/internal/errcode"
)

// Default bounds on the request bodies the HTTP server holds (HTTPOptions).
const (
	// DefaultBodyBytes bounds the bytes of all POST bodies held at once: being read, or
	// read and their request not yet answered.
	DefaultBodyBytes = 512 << 20
	// DefaultBodyBytesPerCaller bounds those of one caller: four messages of the largest
	// size (MaxMessageBytes) at once.
	DefaultBodyBytesPerCaller = 4 * MaxMessageBytes
	// DefaultBodyTimeout is how long a POST body may take to arrive once its headers have.
	DefaultBodyTimeout = 2 * time.Minute
)

// bodyBudget bounds the bytes of request bodies the server holds, in all and per caller.
// Each message is read whole before anyone parses it, so without a bound a caller could
// open connections, send most of a 16 MiB body on each and stall, holding server memory
// for as long as it likes. A body declared with its length is counted in full before
// a byte of it is read (a body past the bound is refused at once); one sent in chunks is
// counted as it arrives. The bytes count until the request is answered.
type bodyBudget struct {
	max, perCaller int64

	mu   sync.Mutex
	all  int64
	held map[string]int64 // caller id → bytes
}

func newBodyBudget(max, perCaller int64) *bodyBudget {
	if max <= 0 {
		max = DefaultBodyBytes
	}
	if perCaller <= 0 {
		perCaller = DefaultBodyBytesPerCaller
	}
	return &bodyBudget{max: max, perCaller: perCaller, held: map[string]int64{}}
}

// take counts n more bytes of caller's, or refuses them with the HTTP status to answer:
// 503 when the server holds its most, 429 when the caller does.
func (b *bodyBudget) take(caller string, n int64) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.held[caller]+n > b.perCaller:
		return http.StatusTooManyRequests, errcode.Errorf(errcode.Busy, "caller %q has %d bytes of requests being read or served, and this one would take it past %d, the most one caller may have at once; retry when one is answered", caller, b.held[caller], b.perCaller)
	case b.all+n > b.max:
		return http.StatusServiceUnavailable, errcode.Errorf(errcode.Busy, "the server holds %d bytes of requests being read or served, and this one would take it past %d, the most it holds at once; retry when one is answered", b.all, b.max)
	}
	b.held[caller] += n
	b.all += n
	return 0, nil
}

// give returns n bytes of caller's.
func (b *bodyBudget) give(caller string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all -= n
	if b.held[caller] -= n; b.held[caller] <= 0 {
		delete(b.held, caller)
	}
}

// errBodyTimeout is a body that did not arrive within its time.
var errBodyTimeout = errors.New("body timeout")

// readBody reads r's body, up to limit+1 bytes, counting them in b for caller (the count
// to give back is returned, also on error), within timeout of its start. A refusal by the
// budget comes with its HTTP status; errBodyTimeout when the time ran out.
func (b *bodyBudget) readBody(w http.ResponseWriter, r *http.Request, caller string, limit int64, timeout time.Duration) (body []byte, taken int64, status int, err error) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(timeout)) == nil {
		defer func() {
			// Cleared once the body is read whole (a long answer's stream then has no
			// deadline). A body refused or left unread keeps it: net/http discards the
			// rest after the answer, and must not wait for it for ever (bodyDeadline).
			if err == nil && status == 0 {
				rc.SetReadDeadline(time.Time{})
			}
		}()
	}
	in := io.LimitReader(r.Body, limit+1)
	if n := r.ContentLength; n >= 0 {
		n = min(n, limit+1)
		if status, err := b.take(caller, n); err != nil {
			return nil, 0, status, err
		}
		body = make([]byte, 0, n)
		taken = n
	}
	chunk := make([]byte, 32<<10)
	for {
		k, rerr := in.Read(chunk)
		if k > 0 {
			if extra := int64(len(body)+k) - taken; extra > 0 {
				if status, err := b.take(caller, extra); err != nil {
					return nil, taken, status, err
				}
				taken += extra
			}
			body = append(body, chunk[:k]...)
		}
		switch {
		case rerr == io.EOF:
			return body, taken, 0, nil
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			return body, taken, 0, errBodyTimeout
		case rerr != nil:
			return body, taken, 0, rerr
		}
	}
}

// callerOf names the caller of an HTTP request: its token's, or anonymous without one.
func callerOf(r *http.Request, anonymous string) string {
	if ti := sdkauth.TokenInfoFromContext(r.Context()); ti != nil {
		if id, ok := auth.FromTokenInfo(ti); ok {
			return id.ID
		}
	}
	return anonymous
}
