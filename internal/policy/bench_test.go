package policy

import (
	"fmt"
	"strings"
	"testing"
)

// benchSet loads a set of n policies: one broad permit and n-1 forbids, each
// matching a distinct pattern on the response that the benchmark text avoids,
// so that every policy is evaluated against the whole text.
func benchSet(b *testing.B, n int) *Set {
	var sb strings.Builder
	sb.WriteString(permitAll)
	for i := 1; i < n; i++ {
		fmt.Fprintf(&sb, "@id(\"f%d\") forbid (principal, action == Action::\"respond\", resource) when { context.response_bytes > 0 && context.response like \"*MARK%d*\" };\n", i, i)
	}
	s := loadDir(b, makeProject(b, map[string]string{"policies/bench.cedar": sb.String()}, nil))
	if s.Mode != ModeCedar || len(s.PolicyIDs()) != n {
		b.Fatalf("mode %s, %d policies: %s", s.Mode, len(s.PolicyIDs()), s.Reason)
	}
	return s
}

func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{10, 1000} {
		s := benchSet(b, n)
		for _, size := range []int{1 << 10, 1 << 20} {
			req := request("bench", strings.Repeat("abcdefghijklmnopqrstuvwxyz012345", size/32))
			b.Run(fmt.Sprintf("policies=%d/response=%dKiB", n, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					if d := s.Decide(req); !d.Allow {
						b.Fatalf("denied: %+v", d)
					}
				}
			})
		}
	}
}
