package main

import "testing"

func TestByteSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		str  string
		bad  bool
	}{
		{in: "0", want: 0, str: "0"},
		{in: "1048576", want: 1 << 20, str: "1MiB"},
		{in: "64MiB", want: 64 << 20, str: "64MiB"},
		{in: "1GiB", want: 1 << 30, str: "1GiB"},
		{in: "512KiB", want: 512 << 10, str: "512KiB"},
		{in: "3TiB", want: 3 << 40, str: "3TiB"},
		{in: "100B", want: 100, str: "100B"},
		{in: "1500", want: 1500, str: "1500B"},
		{in: "", bad: true},
		{in: "-1", bad: true},
		{in: "1.5GiB", bad: true},
		{in: "64MB", bad: true},
		{in: "64 MiB", bad: true},
		{in: "MiB", bad: true},
		{in: "99999999TiB", bad: true}, // overflows 64 bits
	} {
		var b byteSize
		err := b.Set(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("Set(%q) = %d, want an error", tt.in, b)
			}
			continue
		}
		if err != nil || uint64(b) != tt.want || b.String() != tt.str {
			t.Errorf("Set(%q) = %d %q, %v; want %d %q", tt.in, b, b.String(), err, tt.want, tt.str)
		}
	}
}
