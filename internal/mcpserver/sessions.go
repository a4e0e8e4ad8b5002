package mcpserver

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/auth"
	"symbi/internal/errcode"
)

// Default caps on the sessions of the HTTP server (HTTPOptions).
const (
	DefaultMaxSessions          = 1024
	DefaultMaxSessionsPerCaller = 32
)

// sessionHeader is the Streamable HTTP header that names a session.
const sessionHeader = "Mcp-Session-Id"

// sessionCaps bounds the HTTP sessions open at once: at most perCaller sessions of one
// caller — a caller opening one more has its own least recently used idle session (no
// request in flight) closed to make room, so that a client that does not close its
// sessions, as one-shot clients do not, keeps working (the evicted session's next request
// is answered 404, on which a client starts a new one); when none is idle, the new one is
// refused — and at most max in all, past which a request that would open one more is
// refused. A session counts from the request that opens it (a POST without a session id:
// initialize) until it ends: closed by its client (DELETE), by the server after SessionIdle
// without a request, or evicted. Without the caps one caller could open sessions until the
// server runs out of memory.
//
// The session to close is chosen when the request arrives (it must be idle then, else the
// request is refused) and closed only once the new session exists: a request the SDK
// refuses (a foreign Host, a bad header) closes nothing. From the moment it is closed the
// evicted session's requests are answered 404 here, before the SDK sees them, so none is
// begun and then cut off by the close.
type sessionCaps struct {
	srv            *mcp.Server
	max, perCaller int
	anonymous      string // the caller of a request without a token

	mu       sync.Mutex
	owner    map[string]string   // session id → caller id
	used     map[string]uint64   // session id → when it was last used, by clock
	clock    uint64              // counts the uses of sessions: a clock no two uses share
	busy     map[string]int      // session id → its POSTs in flight (a GET is its stream)
	pending  map[int]reservation // sessions being opened
	marked   map[string]bool     // sessions a pending reservation will close
	evicting map[string]bool     // sessions being closed: their requests are answered 404
	next     int                 // the next pending key
}

// reservation is a session being opened by caller, which closes victim ("" for none) once
// it is open.
type reservation struct {
	caller  string
	victims []string
}

func newSessionCaps(srv *mcp.Server, max, perCaller int) *sessionCaps {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	if perCaller <= 0 {
		perCaller = DefaultMaxSessionsPerCaller
	}
	return &sessionCaps{srv: srv, max: max, perCaller: perCaller, anonymous: auth.Anonymous.ID,
		owner: map[string]string{}, used: map[string]uint64{}, busy: map[string]int{},
		pending: map[int]reservation{}, marked: map[string]bool{}, evicting: map[string]bool{}}
}

// wrap applies the caps in front of next, the Streamable HTTP handler (behind the token
// check, so that the caller is known).
func (c *sessionCaps) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(sessionHeader); id != "" || r.Method != http.MethodPost {
			c.mu.Lock()
			if c.evicting[id] {
				c.mu.Unlock()
				http.Error(w, "session not found", http.StatusNotFound) // as the SDK answers an ended session
				return
			}
			// Only its owner's requests use a session: another caller's naming it is
			// refused by the SDK (403), and moves neither its use nor its business.
			by, known := c.owner[id]
			owned := known && by == callerOf(r, c.anonymous)
			counted := owned && r.Method == http.MethodPost
			if owned {
				c.clock++
				c.used[id] = c.clock
			}
			if counted {
				c.busy[id]++
			}
			c.mu.Unlock()
			if counted {
				defer func() {
					c.mu.Lock()
					defer c.mu.Unlock()
					if c.busy[id]--; c.busy[id] <= 0 {
						delete(c.busy, id)
					}
				}()
			}
			next.ServeHTTP(w, r)
			return
		}
		caller := callerOf(r, c.anonymous)
		key, status, err := c.reserve(caller)
		if err != nil {
			refuse(w, status, err)
			return
		}
		// The body's limit is set here on the server's own writer too (the SDK sets it on
		// the writer it is given): past it the server must close the connection rather
		// than read on, which only its own writer can tell it.
		r.Body = http.MaxBytesReader(w, r.Body, MaxMessageBytes)
		// The reservation becomes the session (or goes) as the answer's header is sent —
		// before the client can send its next request, which may open another.
		sw := &sessionWriter{ResponseWriter: w, sent: func() { c.opened(key, w.Header().Get(sessionHeader)) }}
		next.ServeHTTP(sw, r)
		sw.once.Do(sw.sent)
	})
}

// sessionWriter calls sent once, before the first byte of the answer is sent.
type sessionWriter struct {
	http.ResponseWriter
	sent func()
	once sync.Once
}

func (w *sessionWriter) WriteHeader(code int) {
	w.once.Do(w.sent)
	w.ResponseWriter.WriteHeader(code)
}

func (w *sessionWriter) Write(b []byte) (int, error) {
	w.once.Do(w.sent)
	return w.ResponseWriter.Write(b)
}

func (w *sessionWriter) Flush() {
	w.once.Do(w.sent)
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer beneath.
func (w *sessionWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// reserve counts a session about to open for caller — marking the caller's least
// recently used idle session to close once it is open, when the caller has perCaller
// already — or refuses it with the HTTP status to answer: 503 when the server is full, 429
// when the caller's sessions are all in use or being opened.
func (c *sessionCaps) reserve(caller string) (key, status int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := c.live()
	// A marked session is counted as the reservation that will close it.
	n, mine := len(c.pending), 0
	var idle []string // the caller's idle sessions
	for id, by := range c.owner {
		switch {
		case live[id] == nil:
			delete(c.owner, id) // ended
			delete(c.used, id)
			delete(c.busy, id)
		case c.marked[id]:
		case by == caller:
			n++
			mine++
			if c.idle(id) {
				idle = append(idle, id)
			}
		default:
			n++
		}
	}
	for _, p := range c.pending {
		if p.caller == caller {
			mine++
		}
	}
	// As many of its least recently used idle sessions as bring the caller below its cap:
	// one, or more when it holds more than its cap (a victim that got a request as the
	// last session opened was not closed).
	var victims []string
	if need := mine - c.perCaller + 1; need > 0 && len(idle) > 0 {
		slices.SortFunc(idle, func(a, b string) int { return cmp.Compare(c.used[a], c.used[b]) })
		victims = idle[:min(need, len(idle))]
		mine, n = mine-len(victims), n-len(victims)
	}
	switch {
	case n >= c.max:
		return 0, http.StatusServiceUnavailable, errcode.Errorf(errcode.Busy, "the server has %d sessions open, the most it keeps (--max-sessions); retry when one ends", n)
	case mine >= c.perCaller:
		return 0, http.StatusTooManyRequests, errcode.Errorf(errcode.Busy, "caller %q has %d sessions open, each serving a request or being opened, the most one caller may have (--max-sessions-per-caller); retry when one is idle", caller, mine)
	}
	for _, v := range victims {
		c.marked[v] = true
	}
	c.next++
	c.pending[c.next] = reservation{caller: caller, victims: victims}
	return c.next, 0, nil
}

// opened ends the reservation key as its answer is sent: id is the session the SDK opened
// for it ("" if it refused the request). An opened, initialized session closes the reservation's
// victims — each unless it ended by itself meanwhile — or, for one that has a request in
// flight by now, the caller's least recently used idle session; with none idle the caller
// keeps a session more than its cap, closed when it next opens one.
func (c *sessionCaps) opened(key int, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[key]
	delete(c.pending, key)
	// The marks go once every victim is dealt with: a busy victim's replacement is never
	// another victim of the same reservation.
	defer func() {
		for _, v := range p.victims {
			delete(c.marked, v)
		}
	}()
	if id == "" {
		return
	}
	c.clock++
	c.owner[id], c.used[id] = p.caller, c.clock
	live := c.live()
	if ss := live[id]; ss != nil && ss.InitializeParams() == nil {
		// An answer naming a session that did not initialize (an initialize that failed:
		// the SDK closes that session once it has answered): no session was opened, and
		// nothing is closed.
		return
	}
	for _, v := range p.victims {
		c.evict(live, p.caller, id, v)
	}
}

// evict closes victim, a session of caller, for the new session id — or, if it has a
// request in flight by now, the caller's least recently used idle session (none, when it
// ended by itself: room was made). c.mu is held.
func (c *sessionCaps) evict(live map[string]*mcp.ServerSession, caller, id, victim string) {
	if live[victim] == nil || c.evicting[victim] {
		return // it ended by itself: room was made
	}
	if !c.idle(victim) {
		victim = ""
		for other, by := range c.owner {
			if by == caller && other != id && !c.marked[other] && !c.evicting[other] && c.idle(other) && (victim == "" || c.used[other] < c.used[victim]) {
				victim = other
			}
		}
	}
	ss := live[victim]
	if ss == nil {
		return
	}
	delete(c.owner, victim)
	delete(c.used, victim)
	delete(c.busy, victim)
	c.evicting[victim] = true
	// Closing waits for whatever the session still serves (its stream): not on this request.
	go func() {
		ss.Close()
		c.mu.Lock()
		delete(c.evicting, victim)
		c.mu.Unlock()
	}()
}

// idle reports whether session id has no POST in flight.
func (c *sessionCaps) idle(id string) bool { return c.busy[id] == 0 }

// live returns the server's open sessions by id.
func (c *sessionCaps) live() map[string]*mcp.ServerSession {
	live := map[string]*mcp.ServerSession{}
	for ss := range c.srv.Sessions() {
		live[ss.ID()] = ss
	}
	return live
}

// refuse answers an HTTP request with a JSON-RPC error (its id unknown: null) carrying
// err's coded text.
func refuse(w http.ResponseWriter, status int, err error) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": codeServerError, "message": errcode.Text(err)}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s\n", body)
}
