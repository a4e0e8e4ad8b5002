package dsl

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration units: a month is 30 days and a year 365 days.
var durationUnits = []struct {
	suffix string
	unit   time.Duration
}{
	{".seconds", time.Second},
	{".minutes", time.Minute},
	{".hours", time.Hour},
	{"months", 30 * 24 * time.Hour},
	{"s", time.Second},
	{"m", time.Minute},
	{"h", time.Hour},
	{"d", 24 * time.Hour},
	{"w", 7 * 24 * time.Hour},
	{"y", 365 * 24 * time.Hour},
}

// ParseDuration parses a duration of the language: digits followed by one of .seconds,
// .minutes, .hours, s, m, h, d, w, months, y — or bare digits, meaning seconds. It does
// not check the range; admission requires 1 s .. 1 day for a timeout.
func ParseDuration(s string) (time.Duration, error) {
	digits, unit := s, time.Second
	for _, u := range durationUnits {
		if strings.HasSuffix(s, u.suffix) {
			digits, unit = strings.TrimSuffix(s, u.suffix), u.unit
			break
		}
	}
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a duration (digits followed by .seconds, .minutes, .hours, s, m, h, d, w, months or y; or integer seconds)", s)
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > int64(1<<63-1)/int64(unit) {
		return 0, fmt.Errorf("duration %q is out of range", s)
	}
	return time.Duration(n) * unit, nil
}
