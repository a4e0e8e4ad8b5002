package ledger

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// verifyEach is Verify one signature at a time: the Reader, line by line.
func verifyEach(data []byte, pub ed25519.PublicKey) *Report {
	r := &Report{Problems: []Problem{}}
	rd := NewReader(pub)
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			r.TailBytes = len(data)
			break
		}
		l, err := rd.Next(data[:i+1])
		data = data[i+1:]
		if err != nil {
			r.Problems = append(r.Problems, Problem{Line: n, Message: err.Error()})
			return r
		}
		r.Entries = append(r.Entries, *l)
	}
	return r
}

// verifyBoth requires Verify (signatures checked together) and the Reader (one at a
// time) to report the same of data.
func verifyBoth(t *testing.T, name string, data []byte, pub ed25519.PublicKey) *Report {
	t.Helper()
	batched, each := Verify(data, pub), verifyEach(data, pub)
	if !reflect.DeepEqual(batched, each) {
		t.Errorf("%s: Verify and the Reader differ\nVerify %+v\nReader %+v", name, batched.Problems, each.Problems)
	}
	return batched
}

// TestVerifyPaths: the vectors, every byte of a small ledger flipped, and a ledger long
// enough to be checked in a batch — genuine, edited, reordered, torn, under another key,
// with a journal line in it — verify to the same report together and line by line.
func TestVerifyPaths(t *testing.T) {
	pub := testKey().Public().(ed25519.PublicKey)
	vectors, _ := filepath.Glob(filepath.Join(vectorDir, "*.jsonl"))
	if len(vectors) < 5 {
		t.Fatalf("only %d ledger vectors", len(vectors))
	}
	for _, path := range vectors {
		verifyBoth(t, path, mustRead(t, path), pub)
	}
	small := sample(t, 3)
	buf := bytes.Clone(small)
	for i := range buf {
		for _, m := range []byte{0x01, 0x80} {
			buf[i] ^= m
			verifyBoth(t, fmt.Sprintf("byte %d ^ %#x", i, m), buf, pub)
			buf[i] ^= m
		}
	}
	long := sample(t, 300)
	ls := lines(long)
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)).Public().(ed25519.PublicKey)
	edited := bytes.Clone(long)
	edited[bytes.Index(edited, []byte(`"run-150"`))+5] = '7'
	for name, data := range map[string][]byte{
		"long":            long,
		"long, edited":    edited,
		"long, reordered": bytes.Join(append(append(append([][]byte{}, ls[:100]...), ls[101], ls[100]), ls[102:]...), nil),
		"long, torn":      long[:len(long)-30],
		"long, a journal line": bytes.Join(append(append(append([][]byte{}, ls[:250]...),
			[]byte(`{"payload":{},"signature":"`+string(bytes.Repeat([]byte("A"), 86))+`=="}`+"\n")), ls[250:]...), nil),
	} {
		r := verifyBoth(t, name, data, pub)
		if name == "long" && (len(r.Problems) != 0 || len(r.Entries) != 300) {
			t.Errorf("the long ledger: %d entries, problems %v", len(r.Entries), r.Problems)
		}
		verifyBoth(t, name+", other key", data, other)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
