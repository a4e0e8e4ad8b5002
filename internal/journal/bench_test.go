package journal

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
	// A delegated run's start, then its agent's thoughts: a record a run may repeat.
	for _, r := range delegatedRecords()[:2] {
		if err := w.Append(r); err != nil {
			b.Fatal(err)
		}
	}
	text := strings.Repeat("x", 200)
	rec := AgentThought{TextSHA256: sum(text), Bytes: int64(len(text)), Chunks: 4, Text: text}
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

// longRun returns the records of a long delegated run of n records, unfinished: started,
// session_started, then the agent's thoughts, tool calls, permissions, file reads, tool
// updates and messages, over and over.
func longRun(n int) []Record {
	dr := delegatedRecords()
	recs := []Record{dr[0], dr[1]}
	for i := 0; len(recs) < n; i++ {
		perm := dr[4].(PermissionDecided)
		read := dr[5].(FSRead)
		perm.RequestID = fmt.Sprintf("fs-%d", i)
		read.RequestID = perm.RequestID
		recs = append(recs, dr[2], dr[3], perm, read, dr[6], dr[9])
	}
	return recs[:n]
}

// rawMessages returns the signed messages and signatures of every line of journal bytes.
func rawMessages(t testing.TB, data []byte) (msgs, sigs [][]byte) {
	for _, l := range splitLines(data) {
		p, sigText, err := splitLine(l)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := decodeSig(sigText)
		if err != nil {
			t.Fatal(err)
		}
		msgs, sigs = append(msgs, signedMessage(p)), append(sigs, sig)
	}
	return msgs, sigs
}

// rawVerify checks each signature with crypto/ed25519, one at a time, on workers
// goroutines; the floor verification is measured against.
func rawVerify(t testing.TB, pub ed25519.PublicKey, msgs, sigs [][]byte, workers int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j := w; j < len(msgs); j += workers {
				if !ed25519.Verify(pub, msgs[j], sigs[j]) {
					t.Error("raw verify failed")
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkVerify measures, side by side in each iteration, verification of one journal
// of 10,000 records (a long delegated run) and raw ed25519.Verify of the same signed
// messages one at a time; x-raw-verify is verification's rate over the raw rate.
func BenchmarkVerify(b *testing.B) {
	_, root := newProject(b)
	s := openStore(b, root)
	const n = 10000
	w := writeRecords(b, s, "bench", "run", longRun(n))
	data := mustRead(b, w.Path())
	pub := s.PublicKey()
	msgs, sigs := rawMessages(b, data)
	var tv, tr time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if r := verifyBytes(data, pub, VerifyOptions{}); r.Records != n || r.ExitCode() != 2 {
			b.Fatalf("report %s", reportJSON(r))
		}
		t1 := time.Now()
		rawVerify(b, pub, msgs, sigs, 1)
		tv, tr = tv+t1.Sub(t0), tr+time.Since(t1)
	}
	total := float64(b.N * n)
	b.ReportMetric(total/tv.Seconds(), "journal-rec/s")
	b.ReportMetric(total/tr.Seconds(), "raw-rec/s")
	b.ReportMetric(float64(tr)/float64(tv), "x-raw-verify")
}

// BenchmarkVerifyDir measures, side by side in each iteration, VerifyDir of a directory of
// 2,000 finished runs (five-record journals) and raw ed25519.Verify of the same signed
// messages one at a time, spread over as many goroutines as VerifyDir uses (GOMAXPROCS).
func BenchmarkVerifyDir(b *testing.B) {
	_, root := newProject(b)
	s := openStore(b, root)
	const runs = 2000
	var msgs, sigs [][]byte
	for i := range runs {
		w := writeRun(b, s, allowedRunDef, fmt.Sprintf("00000000-0000-4000-8000-%012d", i), -1)
		m, g := rawMessages(b, mustRead(b, w.Path()))
		msgs, sigs = append(msgs, m...), append(sigs, g...)
	}
	pub := s.PublicKey()
	workers := runtime.GOMAXPROCS(0)
	var tv, tr time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		reports, err := VerifyDir(s.Dir(), pub)
		if err != nil || len(reports) != runs {
			b.Fatalf("%d reports, %v", len(reports), err)
		}
		for _, r := range reports {
			if r.ExitCode() != 0 {
				b.Fatalf("report %s", reportJSON(r))
			}
		}
		t1 := time.Now()
		rawVerify(b, pub, msgs, sigs, workers)
		tv, tr = tv+t1.Sub(t0), tr+time.Since(t1)
	}
	total := float64(b.N * len(msgs))
	b.ReportMetric(total/tv.Seconds(), "dir-rec/s")
	b.ReportMetric(total/tr.Seconds(), "raw-rec/s")
	b.ReportMetric(float64(tr)/float64(tv), "x-raw-verify")
}
