package mcpserver

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"symbi/internal/errcode"
)

// maxBuckets bounds the callers a rateLimiter tracks at once; past it, buckets that have
// refilled completely (callers idle for at least a full burst) are dropped first.
const maxBuckets = 4096

// rateLimiter is a token bucket per caller: rate tokens a second, holding at most burst.
// Each request a caller makes takes one token; a caller with none is refused.
type rateLimiter struct {
	rate, burst float64
	now         func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// newRateLimiter returns a limiter of perSecond requests a second per caller, with a
// burst of one second's worth (at least one request).
func newRateLimiter(perSecond float64, now func() time.Time) *rateLimiter {
	return &rateLimiter{rate: perSecond, burst: math.Max(1, math.Ceil(perSecond)), now: now, buckets: map[string]*bucket{}}
}

// allow takes a token of caller's bucket, or says how long until one is there.
func (l *rateLimiter) allow(caller string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[caller]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[caller] = b
	}
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(l.burst, b.tokens+elapsed*l.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, retryAfter((1 - b.tokens) / l.rate)
}

// maxRetry bounds the wait a refusal names: a rate slow enough would otherwise overflow
// time.Duration into a negative wait.
const maxRetry = 1000 * time.Hour

// retryAfter is a wait of secs seconds, at most maxRetry.
func retryAfter(secs float64) time.Duration {
	if secs >= maxRetry.Seconds() || secs != secs {
		return maxRetry
	}
	return time.Duration(secs * float64(time.Second))
}

// prune drops the buckets that have refilled, and if none has, the oldest.
func (l *rateLimiter) prune(now time.Time) {
	var oldest string
	for id, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, id)
		} else if oldest == "" || b.last.Before(l.buckets[oldest].last) {
			oldest = id
		}
	}
	if len(l.buckets) >= maxBuckets {
		delete(l.buckets, oldest)
	}
}

// limitedMethods are the requests that count against a caller's rate: the ones that do
// work. Initialization, pings, listings and notifications do not.
// subscriptions/listen subscribes as resources/subscribe does (protocol 2026-07-28).
var limitedMethods = map[string]bool{"tools/call": true, "resources/read": true, "resources/subscribe": true, "subscriptions/listen": true}

// middleware refuses a caller's request past its rate: a tool call gets a rate_limited
// tool error (like every other refusal), a resource request a JSON-RPC error.
func (l *rateLimiter) middleware(cfg *Config) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if !limitedMethods[method] {
				return next(ctx, method, req)
			}
			by := cfg.caller(req.GetExtra())
			if ok, wait := l.allow(by.ID); !ok {
				err := errcode.Errorf(errcode.RateLimited, "caller %q is over its request rate (%g a second, --rate); retry in %s", by.ID, l.rate, wait.Round(time.Millisecond))
				if method == "tools/call" {
					return errorResult(err), nil
				}
				return nil, protocolError(err)
			}
			return next(ctx, method, req)
		}
	}
}
