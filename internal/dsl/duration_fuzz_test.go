package dsl_test

import (
	"math"
	"math/big"
	"regexp"
	"testing"
	"time"

	"symbi/internal/dsl"
)

// durationForm is dsl.md's duration: digits followed by one of the units, or bare digits
// (seconds).
var durationForm = regexp.MustCompile(`\A([0-9]+)(\.seconds|\.minutes|\.hours|months|s|m|h|d|w|y)?\z`)

var durationUnit = map[string]time.Duration{
	"": time.Second, ".seconds": time.Second, "s": time.Second, ".minutes": time.Minute, "m": time.Minute,
	".hours": time.Hour, "h": time.Hour, "d": 24 * time.Hour, "w": 7 * 24 * time.Hour,
	"months": 30 * 24 * time.Hour, "y": 365 * 24 * time.Hour,
}

// FuzzParseDuration: a definition's timeout (and any duration literal) is read by
// ParseDuration. It accepts exactly dsl.md's form whose value fits a time.Duration, and
// then returns digits × unit, computed here without overflow; everything else is an error.
// FuzzAdmit reaches it only through a whole definition, rarely with a huge number.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{
		"30.seconds", "5.minutes", "2.hours", "30s", "5m", "1h", "2d", "1w", "2months", "1y", "45", "0", "007s",
		"", "s", ".seconds", "1.5h", "-1s", "+1s", " 1s", "1s ", "1_000s", "10x", "1ms", "1.months", "1month", "1M",
		"9223372036s", "9223372037s", "9223372036854775807", "9223372036854775808", "292y", "293y", "106751d",
		"106752d", "15250w", "15251w", "3558months", "3559months", "2562047h", "2562048h", "1\u0663s", "１s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := dsl.ParseDuration(s)
		m := durationForm.FindStringSubmatch(s)
		var want *big.Int
		if m != nil {
			n, _ := new(big.Int).SetString(m[1], 10)
			want = n.Mul(n, big.NewInt(int64(durationUnit[m[2]])))
			if want.Cmp(big.NewInt(math.MaxInt64)) > 0 {
				want = nil // out of range
			}
		}
		switch {
		case want == nil && err == nil:
			t.Fatalf("ParseDuration(%q) = %v; want an error (form %v)", s, d, m != nil)
		case want != nil && err != nil:
			t.Fatalf("ParseDuration(%q): %v; want %s ns", s, err, want)
		case want != nil && big.NewInt(int64(d)).Cmp(want) != 0:
			t.Fatalf("ParseDuration(%q) = %d ns, want %s", s, d, want)
		}
	})
}
