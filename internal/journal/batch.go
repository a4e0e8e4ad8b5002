package journal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"

	"github.com/oasisprotocol/curve25519-voi/curve"
	"github.com/oasisprotocol/curve25519-voi/curve/scalar"
	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Signatures checked in batches.
//
// crypto/ed25519.Verify accepts the signature R‖S by the key A on the message M exactly
// when S < L (the group order), A's 32 bytes decode to a point (non-canonical encodings
// included), and the canonical encoding of [S]B − [k]A is R's 32 bytes, where
// k = SHA-512(R‖A‖M) mod L: the cofactorless equation, R canonical, small-order A and R
// not refused.
//
// A batch (curve25519-voi's BatchVerifier) checks n signatures with one random linear
// combination of their equations: [8]·Σ zᵢ([Sᵢ]B − Rᵢ − [kᵢ]A) = 0 for random 128-bit zᵢ.
// That equation is cofactored — it cannot be otherwise — and so accepts more than the
// standard library: a signature whose R carries a small-order component T
// (R = [S]B − [k]A + T) satisfies it and not the cofactorless one. Only the key's holder
// can make such a signature, but a verdict must be the standard library's, so a batch
// passes only when also
//
//   - A is torsion-free (in the prime-order subgroup), and
//   - every Rᵢ is torsion-free: each of torsionTests random subset sums of the Rᵢ is.
//     A sum of torsion-free points is torsion-free; when some Rᵢ is not, a random subset
//     sum keeps a nonzero torsion component with probability at least 1/2, so all the
//     tests pass with probability at most 2⁻¹²⁸, the batch equation's own bound.
//
// Then each [Sᵢ]B − Rᵢ − [kᵢ]A lies in the prime-order subgroup and, the batch having
// found it of small order, is the identity: [Sᵢ]B − [kᵢ]A = Rᵢ, and Rᵢ's bytes are its
// canonical encoding (batchOptions refuses a non-canonical R) — the standard library's
// check, passed. A batch that fails anything, or is smaller than batchMin, is checked
// again one signature at a time with crypto/ed25519.Verify, which then gives every
// verdict. Either way each verdict is crypto/ed25519.Verify's.

// envelopes opens many lines under one key and context as Open opens each, with their
// signatures checked together: add every line, check, then read each line's outcome.
type envelopes struct {
	pub      ed25519.PublicKey
	context  string
	checker  sigCheck
	lines    []opened // per line added
	payloads [][]byte // per signature to check
	sigs     [][]byte
	at       []int // the line of each signature
	group    []int // the addLines call (a journal file) of each signature
	groups   int   // addLines calls so far
	// failLimit, when positive, is how many signatures of one group fail before the
	// rest of its signatures are left unchecked (errUnchecked): a journal's report then
	// lists no more problems, and what follows is counted, not read.
	failLimit int
}

// errUnchecked is the outcome of a line whose signature was not checked: its journal's
// report lists no more problems by then, and the line is counted, not read.
var errUnchecked = errors.New("signature not checked: the report lists no more problems")

// opened is what Open returns for one line: P, or why the line does not open.
type opened struct {
	p   []byte
	err error
}

func newEnvelopes(pub ed25519.PublicKey, context string, check sigCheck) *envelopes {
	return &envelopes{pub: pub, context: context, checker: check}
}

// add takes one line: its shape, signature encoding and the key are checked now (the
// error returned), its signature by check.
func (e *envelopes) add(line []byte) error {
	p, sig, err := unseal(line, e.pub)
	e.lines = append(e.lines, opened{p: p, err: err})
	if err == nil {
		e.payloads, e.sigs, e.at = append(e.payloads, p), append(e.sigs, sig), append(e.at, len(e.lines)-1)
		e.group = append(e.group, e.groups)
	}
	return err
}

// addLines adds the complete lines of data (a torn tail is not a line) and returns the
// index of the first and how many it added. It stops after maxProblems+1 lines that do
// not open: each is a problem of the report, which then lists no more and is invalid
// already — so a file of 64 MiB of empty lines costs what one of a hundred does.
func (e *envelopes) addLines(data []byte) (first, added int) {
	defer func() { e.groups++ }()
	first = len(e.lines)
	for failed := 0; failed <= maxProblems; {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		if e.add(data[:i+1]) != nil {
			failed++
		}
		data = data[i+1:]
	}
	return first, len(e.lines) - first
}

// check checks every signature added — batchMax at a time, in order, once failLimit is
// set: a group whose failLimit signatures failed has the rest of its signatures left
// unchecked (a file of bad signatures costs what its first hundred do).
func (e *envelopes) check() {
	if e.failLimit <= 0 {
		e.checkRange(0, len(e.sigs))
	} else {
		failed := map[int]int{}
		var payloads, sigs [][]byte
		var at []int
		for lo := 0; lo < len(e.sigs); lo += batchMax {
			payloads, sigs, at = payloads[:0], sigs[:0], at[:0]
			for i := lo; i < min(lo+batchMax, len(e.sigs)); i++ {
				if failed[e.group[i]] >= e.failLimit {
					e.lines[e.at[i]] = opened{err: errUnchecked}
					continue
				}
				payloads, sigs, at = append(payloads, e.payloads[i]), append(sigs, e.sigs[i]), append(at, i)
			}
			for j, ok := range e.checker(e.pub, e.context, payloads, sigs) {
				if !ok {
					e.lines[e.at[at[j]]] = opened{err: errSignature}
					failed[e.group[at[j]]]++
				}
			}
		}
	}
	e.payloads, e.sigs, e.at, e.group = nil, nil, nil, nil
}

// checkRange checks the signatures lo to hi together.
func (e *envelopes) checkRange(lo, hi int) {
	for i, ok := range e.checker(e.pub, e.context, e.payloads[lo:hi], e.sigs[lo:hi]) {
		if !ok {
			e.lines[e.at[lo+i]] = opened{err: errSignature}
		}
	}
}

// open returns line i's P and error, as Open would have.
func (e *envelopes) open(i int) ([]byte, error) { return e.lines[i].p, e.lines[i].err }

// OpenAll opens lines (each ending in "\n") under pub and context as Open opens each,
// with their signatures checked together in batches; payloads[i] and errs[i] are what
// Open returns for lines[i], and no payload is returned before its signature verified.
// Use it to read a whole signed log; Open to follow one line by line.
func OpenAll(lines [][]byte, pub ed25519.PublicKey, context string) (payloads [][]byte, errs []error) {
	env := newEnvelopes(pub, context, checkBatched)
	for _, l := range lines {
		env.add(l)
	}
	env.check()
	payloads, errs = make([][]byte, len(lines)), make([]error, len(lines))
	for i := range lines {
		payloads[i], errs[i] = env.open(i)
	}
	return payloads, errs
}

// batchOptions are the verification options of a batch, as close to crypto/ed25519 as a
// batch can be (voi's VerifyOptionsStdLib is not batchable): small-order A and R
// accepted (AllowSmallOrderA, AllowSmallOrderR) and a non-canonical A accepted
// (AllowNonCanonicalA) as the standard library accepts them; a non-canonical R refused
// (AllowNonCanonicalR false), as its byte comparison refuses one; the equation
// cofactored (CofactorlessVerify false), the difference the torsion checks close.
var batchOptions = &voi.Options{Verify: &voi.VerifyOptions{
	AllowSmallOrderA:   true,
	AllowSmallOrderR:   true,
	AllowNonCanonicalA: true,
}}

const (
	// batchMin is the smallest batch: below it the fixed cost of a batch (its torsion
	// checks, ≈ 3 ms) is more than batching saves — measured even at 96 signatures,
	// 1.2× faster than one at a time at 128, 2× at 512, 3× at 4096 — and signatures are
	// checked one at a time.
	batchMin = 128
	// batchMax bounds a batch, and so the work done again when one fails.
	batchMax = 4096
	// torsionTests is the number of random subset sums of the Rᵢ checked torsion-free.
	torsionTests = 128
)

// sigCheck reports, for each i, whether sigs[i] is a valid signature by pub over
// context followed by payloads[i]. pub is a 32-byte key, every sig 64 bytes.
type sigCheck func(pub ed25519.PublicKey, context string, payloads, sigs [][]byte) []bool

// checkEach is sigCheck one signature at a time with crypto/ed25519.Verify.
func checkEach(pub ed25519.PublicKey, context string, payloads, sigs [][]byte) []bool {
	ok := make([]bool, len(sigs))
	var msg []byte
	for i := range sigs {
		msg = append(append(msg[:0], context...), payloads[i]...)
		ok[i] = ed25519.Verify(pub, msg, sigs[i])
	}
	return ok
}

// checkBatched is sigCheck in batches of batchMin to batchMax signatures, each verdict
// crypto/ed25519.Verify's (see above).
func checkBatched(pub ed25519.PublicKey, context string, payloads, sigs [][]byte) []bool {
	return checkBatchedFrom(pub, context, payloads, sigs, batchMin)
}

// checkBatchedFrom is checkBatched with the smallest batch given (tests batch a few).
func checkBatchedFrom(pub ed25519.PublicKey, context string, payloads, sigs [][]byte, least int) []bool {
	n := len(sigs)
	if n < least {
		return checkEach(pub, context, payloads, sigs)
	}
	key, keyOK := batchKey(pub)
	ok := make([]bool, n)
	batches := (n + batchMax - 1) / batchMax
	for b := range batches {
		lo, hi := b*n/batches, (b+1)*n/batches
		if keyOK && batchPasses(key, context, payloads[lo:hi], sigs[lo:hi]) {
			for i := lo; i < hi; i++ {
				ok[i] = true
			}
			continue
		}
		copy(ok[lo:hi], checkEach(pub, context, payloads[lo:hi], sigs[lo:hi]))
	}
	return ok
}

// batchKey expands pub for a batch; false when it does not decode or is not
// torsion-free, and its signatures are checked one at a time.
func batchKey(pub ed25519.PublicKey) (*voi.ExpandedPublicKey, bool) {
	var a curve.EdwardsPoint
	if !decodePoint(&a, pub) || !torsionFree(&a) {
		return nil, false
	}
	key, err := voi.NewExpandedPublicKey(voi.PublicKey(pub))
	return key, err == nil
}

// batchPasses reports whether every signature verifies, by the batch equation and the
// torsion checks; false says only that some signature may not.
func batchPasses(key *voi.ExpandedPublicKey, context string, payloads, sigs [][]byte) bool {
	size := 0
	for _, p := range payloads {
		size += len(context) + len(p)
	}
	msgs := make([]byte, 0, size) // every signed message, each its own bytes
	v := voi.NewBatchVerifierWithCapacity(len(sigs))
	for i := range sigs {
		start := len(msgs)
		msgs = append(append(msgs, context...), payloads[i]...)
		v.AddExpandedWithOptions(key, msgs[start:], sigs[i], batchOptions)
	}
	return v.VerifyBatchOnly(rand.Reader) && torsionFreeRs(sigs)
}

// decodePoint decodes 32 bytes as an Edwards point (any encoding the standard library
// decodes).
func decodePoint(p *curve.EdwardsPoint, b []byte) bool {
	var c curve.CompressedEdwardsY
	if _, err := c.SetBytes(b); err != nil {
		return false
	}
	_, err := p.SetCompressedY(&c)
	return err == nil
}

// torsionFree reports whether p is in the prime-order subgroup: [L]p is the identity.
func torsionFree(p *curve.EdwardsPoint) bool {
	var q curve.EdwardsPoint
	return q.DoubleScalarMulBasepointVartime(scalar.BASEPOINT_ORDER, p, scalar.New()).IsIdentity()
}

// torsionFreeRs reports whether the R of every signature is torsion-free, by
// torsionTests random subset sums of the Rᵢ (see above), each checked torsion-free. Each
// Rᵢ gets a random bit per test; the tests go in rounds of 8: in a round, Rᵢ is added to
// the bucket its 8 bits name, and the sum of test j is then the sum of the buckets whose
// number has bit j set, all 8 read off the 256 buckets by folding them in half 8 times.
func torsionFreeRs(sigs [][]byte) bool {
	pts := make([]curve.EdwardsPoint, len(sigs))
	for i, sig := range sigs {
		if !decodePoint(&pts[i], sig[:32]) {
			return false
		}
	}
	const rounds = torsionTests / 8
	bits := make([]byte, rounds*len(pts))
	rand.Read(bits) // never fails: crypto/rand ends the program instead
	var buckets [256]curve.EdwardsPoint
	var used [256]bool // buckets[b] holds some Rᵢ (an unused one is the identity)
	var sum curve.EdwardsPoint
	for k := range rounds {
		used = [256]bool{}
		for i := range pts {
			switch b := bits[i*rounds+k]; {
			case b == 0:
			case used[b]:
				buckets[b].Add(&buckets[b], &pts[i])
			default:
				buckets[b].Set(&pts[i])
				used[b] = true
			}
		}
		for half := 128; half >= 1; half /= 2 {
			// buckets[q], q < 2·half, holds every Rᵢ whose bits agree with q below 2·half.
			sum.Identity()
			for q := half; q < 2*half; q++ {
				if used[q] {
					sum.Add(&sum, &buckets[q])
				}
			}
			if !torsionFree(&sum) {
				return false
			}
			for q := range half {
				switch {
				case !used[q+half]:
				case used[q]:
					buckets[q].Add(&buckets[q], &buckets[q+half])
				default:
					buckets[q].Set(&buckets[q+half])
					used[q] = true
				}
			}
		}
	}
	return true
}
