package main

import (
	"math"
	"math/big"
	"regexp"
	"testing"
)

// byteSizeForm is --min-free-space's documented value: a whole number with an optional
// unit (the flag's help: "e.g. 64MiB; 0: no floor"; byteSize: KiB, MiB, GiB, TiB or B).
var byteSizeForm = regexp.MustCompile(`\A([0-9]+)(TiB|GiB|MiB|KiB|B)?\z`)

var byteSizeUnit = map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

// FuzzByteSize: the flag accepts exactly a whole number with an optional IEC unit whose
// value fits 64 bits, and holds number × unit, computed here without overflow; what it
// prints (the default in --help) reads back as the same value.
func FuzzByteSize(f *testing.F) {
	for _, s := range []string{
		"0", "1048576", "64MiB", "1GiB", "512KiB", "3TiB", "100B", "1500", "0B", "0TiB", "007MiB",
		"", "-1", "+1", "1.5GiB", "64MB", "64 MiB", " 64MiB", "MiB", "B", "1_000", "0x10", "1KiBB", "1kib",
		"18446744073709551615", "18446744073709551616", "16777215TiB", "16777216TiB", "17179869183GiB", "17179869184GiB",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b byteSize
		err := b.Set(s)
		m := byteSizeForm.FindStringSubmatch(s)
		var want *big.Int
		if m != nil {
			n, _ := new(big.Int).SetString(m[1], 10)
			want = n.Mul(n, big.NewInt(byteSizeUnit[m[2]]))
			if want.Cmp(new(big.Int).SetUint64(math.MaxUint64)) > 0 {
				want = nil
			}
		}
		switch {
		case want == nil && err == nil:
			t.Fatalf("Set(%q) = %d; want a usage error", s, b)
		case want == nil:
			return
		case err != nil:
			t.Fatalf("Set(%q): %v; want %s bytes", s, err, want)
		case new(big.Int).SetUint64(uint64(b)).Cmp(want) != 0:
			t.Fatalf("Set(%q) = %d, want %s", s, b, want)
		}
		var again byteSize
		if err := again.Set(b.String()); err != nil || again != b {
			t.Fatalf("Set(%q) = %d prints %q, which reads back as %d (%v)", s, b, b.String(), again, err)
		}
	})
}
