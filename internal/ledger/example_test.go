package ledger_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Example checks a saved checkpoint against a ledger with stock tools only, as
// docs/ledger.md tells an auditor to: the note's signature with the verifier key, then the
// root of the ledger's first size lines.
func Example() {
	var exp struct {
		VerifierKey string `json:"note_verifier_key"`
	}
	raw, _ := os.ReadFile("../../testdata/ledger/expected.json")
	json.Unmarshal(raw, &exp)
	cp, _ := os.ReadFile("../../testdata/ledger/checkpoint.txt")
	ledger, _ := os.ReadFile("../../testdata/ledger/ledger.jsonl")

	// The snippet of docs/ledger.md.
	v, _ := note.NewVerifier(exp.VerifierKey)
	n, err := note.Open(cp, note.VerifierList(v)) // signature and key name
	if err != nil {
		log.Fatal(err)
	}
	lines := strings.SplitN(n.Text, "\n", 4) // origin, size, root, ""
	size, _ := strconv.ParseInt(lines[1], 10, 64)
	var hashes []tlog.Hash // the tree of the ledger's first `size` lines
	r := tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(ix))
		for i, x := range ix {
			out[i] = hashes[x]
		}
		return out, nil
	})
	for i, line := range bytes.SplitAfter(ledger, []byte("\n"))[:size] {
		hs, _ := tlog.StoredHashes(int64(i), bytes.TrimSuffix(line, []byte("\n")), r)
		hashes = append(hashes, hs...)
	}
	root, _ := tlog.TreeHash(size, r)
	fmt.Println(base64.StdEncoding.EncodeToString(root[:]) == lines[2])
	// Output: true
}
