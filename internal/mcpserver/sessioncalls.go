package mcpserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrSessionEnded is the cause a tool call is cancelled with when its client ends its
// HTTP session (DELETE).
var ErrSessionEnded = errors.New("the client ended its session")

// sessionCalls cancels the tool calls a session has in flight when its client ends it
// (HTTP DELETE): nobody can receive their answers any more, and an invoke_agent would
// otherwise keep its run — its model calls, its --max-runs slots — to its deadline, while
// the DELETE waited for it (the SDK closes a session once its requests are done). A
// connection that drops is not an end: the transport lets the client resume the stream
// (Last-Event-ID), and the MCP specification of the protocols served over HTTP has a
// disconnection not be taken for a cancellation — notifications/cancelled is one.
type sessionCalls struct {
	mu     sync.Mutex
	calls  map[string]map[*sessionCall]bool // by session id
	ending map[string]map[*sessionEnd]bool  // the DELETEs being served, by session id
}

type sessionCall struct {
	user    string // the token's user, as the SDK binds the session to it ("" without one)
	version string // the protocol version the session negotiated
	cancel  context.CancelCauseFunc
}

// sessionEnd is a DELETE of a session being served: its user, and the protocol version
// it names ("" for none).
type sessionEnd struct{ user, version string }

// ends reports whether the DELETE d ends the call: of the user the session is bound to,
// naming the session's own protocol version or none.
func (d *sessionEnd) ends(call *sessionCall) bool {
	return call.user == d.user && (d.version == "" || d.version == call.version)
}

// register adds call to the calls in flight of the session id, cancelled at once when a
// DELETE of that session is being served (the call began as the DELETE was scanning),
// and returns the function that removes it.
func (c *sessionCalls) register(id string, call *sessionCall) (unregister func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]map[*sessionCall]bool{}
	}
	if c.calls[id] == nil {
		c.calls[id] = map[*sessionCall]bool{}
	}
	c.calls[id][call] = true
	for d := range c.ending[id] {
		if d.ends(call) {
			call.cancel(ErrSessionEnded)
		}
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.calls[id], call)
		if len(c.calls[id]) == 0 {
			delete(c.calls, id)
		}
	}
}

// middleware is receiving middleware: each tools/call of an HTTP session runs under a
// context its session's end cancels.
func (c *sessionCalls) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if method != "tools/call" || ss == nil || ss.ID() == "" {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		call := &sessionCall{user: userOf(req.GetExtra()), cancel: cancel}
		if ip := ss.InitializeParams(); ip != nil {
			call.version = ip.ProtocolVersion
		}
		defer c.register(ss.ID(), call)()
		return next(ctx, method, req)
	}
}

// endOnDelete cancels the calls in flight of the session a DELETE ends, before the SDK
// closes it (it closes a session once its requests are done), and, until the DELETE has
// been served, every call of that session that begins meanwhile — only a DELETE the SDK
// will honour: of the user the request authenticates, whom the SDK binds the session to,
// with the session's own protocol version or none, and not refused by the SDK's
// DNS-rebinding protection. A refused DELETE has no effect.
func (c *sessionCalls) endOnDelete(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(sessionHeader); r.Method == http.MethodDelete && id != "" && !rebinding(r) {
			d := &sessionEnd{version: r.Header.Get("Mcp-Protocol-Version")}
			if ti := sdkauth.TokenInfoFromContext(r.Context()); ti != nil {
				d.user = ti.UserID
			}
			c.mu.Lock()
			if c.ending == nil {
				c.ending = map[string]map[*sessionEnd]bool{}
			}
			if c.ending[id] == nil {
				c.ending[id] = map[*sessionEnd]bool{}
			}
			c.ending[id][d] = true
			for call := range c.calls[id] {
				if d.ends(call) {
					call.cancel(ErrSessionEnded)
				}
			}
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				delete(c.ending[id], d)
				if len(c.ending[id]) == 0 {
					delete(c.ending, id)
				}
				c.mu.Unlock()
			}()
		}
		next.ServeHTTP(w, r)
	})
}

// rebinding reports whether the SDK's DNS-rebinding protection refuses r: a request to a
// loopback address naming a Host that is not one.
func rebinding(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && local != nil && loopbackHost(local.String()) && !loopbackHost(r.Host)
}

// loopbackHost reports whether a host (with or without its port) is localhost or a
// loopback address, as the SDK reads it.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// userOf is the user of a request's token, "" without one.
func userOf(extra *mcp.RequestExtra) string {
	if extra == nil || extra.TokenInfo == nil {
		return ""
	}
	return extra.TokenInfo.UserID
}
