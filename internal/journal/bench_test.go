package journal

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BenchmarkAppendSync measures, side by side in one loop on the same disk, a journal
// append with an fsync per record and a raw write+fsync of a line of the same length.
func BenchmarkAppendSync(b *testing.B) {
	_, root := newProject(b)
	s := openStore(b, root)
	w, err := s.Create("bench", "run")
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(Started{Agent: "bench"}); err != nil {
		b.Fatal(err)
	}
	rec := InferenceFinished{CallID: "call-1", Outcome: "completed", HTTPStatus: 200, ResponseSHA256: sum("r"), TextSHA256: sum("t"), Text: strings.Repeat("x", 200)}
	line, err := w.line(rec)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.OpenFile(filepath.Join(s.Dir(), "raw.bin"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	var tj, tr time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := w.Append(rec); err != nil {
			b.Fatal(err)
		}
		if err := w.Sync(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := raw.Write(line); err != nil {
			b.Fatal(err)
		}
		if err := raw.Sync(); err != nil {
			b.Fatal(err)
		}
		tj, tr = tj+t1.Sub(t0), tr+time.Since(t1)
	}
	b.ReportMetric(float64(tj.Nanoseconds())/float64(b.N), "journal-ns/rec")
	b.ReportMetric(float64(tr.Nanoseconds())/float64(b.N), "raw-ns/rec")
	b.ReportMetric(float64(tj)/float64(tr), "journal/raw")
}

// BenchmarkVerify measures, side by side, verification of a 1,000-record journal and raw
// ed25519.Verify of the same signed messages.
func BenchmarkVerify(b *testing.B) {
	_, root := newProject(b)
	s := openStore(b, root)
	w, err := s.Create("bench", "run")
	if err != nil {
		b.Fatal(err)
	}
	recs := allowedRunDef.records()
	if err := w.Append(recs[0]); err != nil {
		b.Fatal(err)
	}
	const n = 1000
	for i := 1; i < n; i++ {
		if err := w.Append(recs[1+i%3]); err != nil {
			b.Fatal(err)
		}
	}
	w.Close()
	data := mustRead(b, w.Path())
	pub := s.PublicKey()
	var msgs, sigs [][]byte
	for _, l := range splitLines(data) {
		e := len(l) - len(lineSuffix)
		msgs = append(msgs, signedMessage(l[len(linePrefix):e-sigB64Len-len(sigPrefix)]))
		sig, _ := decodeSig(l[e-sigB64Len : e])
		sigs = append(sigs, sig)
	}
	var tv, tr time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if r := verifyBytes(data, pub, VerifyOptions{}); r.Records != n || r.ExitCode() != 2 {
			b.Fatalf("report %s", reportJSON(r))
		}
		t1 := time.Now()
		for j := range msgs {
			if !ed25519.Verify(pub, msgs[j], sigs[j]) {
				b.Fatal("raw verify failed")
			}
		}
		tv, tr = tv+t1.Sub(t0), tr+time.Since(t1)
	}
	total := float64(b.N * n)
	b.ReportMetric(total/tv.Seconds(), "journal-rec/s")
	b.ReportMetric(total/tr.Seconds(), "raw-rec/s")
	b.ReportMetric(float64(tr)/float64(tv), "journal/raw-rate")
}
