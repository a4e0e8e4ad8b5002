package mcpserver

import (
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// servers are the servers New made in this test binary, with their handlers.
var servers sync.Map

func init() {
	testNewServer = func(s *mcp.Server, h *handlers) { servers.Store(s, h) }
}

// Subscriptions returns how many sessions of s are subscribed to some run resource, and
// how many s watches until they end.
func Subscriptions(s *mcp.Server) (sessions, watched int) {
	h, _ := servers.Load(s)
	return h.(*handlers).subscriptions()
}
