package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"symbi/internal/journal"
)

// Origin is the checkpoint origin and note key name of the ledger signed by pub:
// "symbi.ledger/" and the first 16 hex digits of SHA-256 of the public key.
func Origin(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "symbi.ledger/" + hex.EncodeToString(sum[:])[:16]
}

// VerifierKey is the note verifier key of the ledger signed by pub, in the form stock
// note tooling reads: <name>+<hash>+<base64 key>.
func VerifierKey(pub ed25519.PublicKey) (string, error) {
	return note.NewEd25519VerifierKey(Origin(pub), pub)
}

// signer is the project key as a note signer under Origin.
func signer(key ed25519.PrivateKey) (note.Signer, error) {
	pub := key.Public().(ed25519.PublicKey)
	vkey, err := VerifierKey(pub)
	if err != nil {
		return nil, err
	}
	parts := strings.SplitN(vkey, "+", 3) // name, hash, key (base64 may hold "+")
	if len(parts) != 3 {
		return nil, fmt.Errorf("ledger: unexpected verifier key %q", vkey)
	}
	skey := "PRIVATE+KEY+" + parts[0] + "+" + parts[1] + "+" + base64.StdEncoding.EncodeToString(append([]byte{1}, key.Seed()...))
	return note.NewSigner(skey)
}

// Tree is the Merkle tree of a ledger's lines (RFC 6962, hashed with tlog).
type Tree struct {
	hashes []tlog.Hash // every stored hash, in tlog's storage order
	size   int64
}

// NewTree builds the tree of lines (the Leaf of each).
func NewTree(lines []Line) (*Tree, error) {
	t := &Tree{}
	for _, l := range lines {
		hs, err := tlog.StoredHashes(t.size, l.Leaf, t)
		if err != nil {
			return nil, err
		}
		t.hashes = append(t.hashes, hs...)
		t.size++
	}
	return t, nil
}

// ReadHashes implements tlog.HashReader.
func (t *Tree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(t.hashes)) {
			return nil, fmt.Errorf("ledger: hash index %d out of range", x)
		}
		out[i] = t.hashes[x]
	}
	return out, nil
}

// Size is the number of leaves.
func (t *Tree) Size() int64 { return t.size }

// Root is the tree hash of the first n leaves.
func (t *Tree) Root(n int64) (tlog.Hash, error) { return tlog.TreeHash(n, t) }

// Checkpoint is a parsed checkpoint: the signed size and root of the ledger.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
}

// Body is the checkpoint's note text: "<origin>\n<size>\n<base64 root hash>\n".
func (c Checkpoint) Body() string {
	return fmt.Sprintf("%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// SignCheckpoint returns the signed note of the tree's current checkpoint.
func SignCheckpoint(t *Tree, key ed25519.PrivateKey) ([]byte, error) {
	root, err := t.Root(t.size)
	if err != nil {
		return nil, err
	}
	s, err := signer(key)
	if err != nil {
		return nil, err
	}
	c := Checkpoint{Origin: Origin(key.Public().(ed25519.PublicKey)), Size: t.size, Root: root}
	return note.Sign(&note.Note{Text: c.Body()}, s)
}

// ErrCheckpoint is wrapped by every refusal of a checkpoint.
var ErrCheckpoint = errors.New("checkpoint refused")

// OpenCheckpoint verifies a signed checkpoint note with pub and parses it.
func OpenCheckpoint(msg []byte, pub ed25519.PublicKey) (Checkpoint, error) {
	vkey, err := VerifierKey(pub)
	if err != nil {
		return Checkpoint{}, err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return Checkpoint{}, err
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	// note decodes a signature's base64 leniently: the spare bits of its last character
	// before "=" are ignored, and a changed character would still verify. Every byte of a
	// checkpoint counts.
	for _, sig := range n.Sigs {
		if _, err := base64.StdEncoding.Strict().DecodeString(sig.Base64); err != nil {
			return Checkpoint{}, fmt.Errorf("%w: the signature of %s is not canonical base64", ErrCheckpoint, sig.Name)
		}
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 || lines[3] != "" {
		return Checkpoint{}, fmt.Errorf("%w: the body is not origin, size and root hash, one a line", ErrCheckpoint)
	}
	c := Checkpoint{Origin: lines[0]}
	if c.Origin != Origin(pub) {
		return Checkpoint{}, fmt.Errorf("%w: origin %q is not this ledger's %q", ErrCheckpoint, c.Origin, Origin(pub))
	}
	if c.Size, err = strconv.ParseInt(lines[1], 10, 64); err != nil || c.Size < 0 || lines[1] != strconv.FormatInt(c.Size, 10) {
		return Checkpoint{}, fmt.Errorf("%w: size %q is not a decimal count", ErrCheckpoint, lines[1])
	}
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("%w: root %q is not base64 of %d bytes", ErrCheckpoint, lines[2], tlog.HashSize)
	}
	copy(c.Root[:], root)
	return c, nil
}

// CheckConsistent reports whether the checkpoint c, signed earlier, is a prefix of the
// tree now: the tree of its size has its root, proven by a tlog consistency proof. A
// ledger rolled back below c, or rewritten, fails — whoever signed it.
func CheckConsistent(t *Tree, c Checkpoint) error {
	if c.Size > t.size {
		return fmt.Errorf("%w: it covers %d lines, the ledger has %d: the ledger was truncated or rolled back", ErrCheckpoint, c.Size, t.size)
	}
	if c.Size == 0 {
		// The empty tree is a prefix of every tree; tlog has no proof of it to check.
		if empty, err := t.Root(0); err != nil || c.Root != empty {
			return fmt.Errorf("%w: it covers no line, and its root is not the empty tree's", ErrCheckpoint)
		}
		return nil
	}
	now, err := t.Root(t.size)
	if err != nil {
		return err
	}
	proof, err := tlog.ProveTree(t.size, c.Size, t)
	if err != nil {
		return err
	}
	if err := tlog.CheckTree(proof, t.size, now, c.Size, c.Root); err != nil {
		return fmt.Errorf("%w: the ledger's first %d lines are not the ones it signed: the ledger was rewritten (%v)", ErrCheckpoint, c.Size, err)
	}
	return nil
}

// Proof is the inclusion proof of one ledger line in the tree of Size leaves.
type Proof struct {
	Index  int64       `json:"index"`
	Leaf   string      `json:"leaf"` // the line without "\n"
	Size   int64       `json:"size"`
	Root   tlog.Hash   `json:"root"`
	Hashes []tlog.Hash `json:"proof"`
}

// Prove returns the inclusion proof of leaf index in the tree of size n.
func Prove(t *Tree, lines []Line, index, n int64) (*Proof, error) {
	if n < 1 || n > t.size || index < 0 || index >= n {
		return nil, fmt.Errorf("ledger: no line %d in a tree of %d", index, n)
	}
	root, err := t.Root(n)
	if err != nil {
		return nil, err
	}
	p, err := tlog.ProveRecord(n, index, t)
	if err != nil {
		return nil, err
	}
	return &Proof{Index: index, Leaf: string(lines[index].Leaf), Size: n, Root: root, Hashes: p}, nil
}

// ErrProof is wrapped by every refusal of an inclusion proof.
var ErrProof = errors.New("inclusion proof refused")

// CheckProof verifies an inclusion proof with the ledger's public key against checkpoint,
// a signed checkpoint of the same tree (what audit prove prints beside it): the checkpoint's
// signature, its size and root equal to the proof's, the leaf a ledger line signed with
// the key whose seq is its index, and the proof hashes leading from the leaf to the root.
// A proof alone proves nothing: anyone can make one for a tree of their own.
func CheckProof(p *Proof, checkpoint []byte, pub ed25519.PublicKey) error {
	c, err := OpenCheckpoint(checkpoint, pub)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProof, err)
	}
	if p.Size != c.Size || p.Root != c.Root {
		return fmt.Errorf("%w: it is of the tree of %d lines with root %s; the checkpoint signs %d lines with root %s", ErrProof, p.Size, p.Root, c.Size, c.Root)
	}
	var msg []byte
	payload, err := journal.Open([]byte(p.Leaf+"\n"), pub, Context, &msg)
	if err != nil {
		return fmt.Errorf("%w: its leaf is not a line of this ledger: %w", ErrProof, err)
	}
	m, err := journal.PayloadMembers(payload, members)
	if err != nil {
		return fmt.Errorf("%w: its leaf: %w", ErrProof, err)
	}
	if string(m["seq"]) != strconv.FormatInt(p.Index, 10) {
		return fmt.Errorf("%w: its leaf is line seq %s, not index %d", ErrProof, m["seq"], p.Index)
	}
	if err := tlog.CheckRecord(p.Hashes, p.Size, p.Root, p.Index, tlog.RecordHash([]byte(p.Leaf))); err != nil {
		return fmt.Errorf("%w: %w", ErrProof, err)
	}
	return nil
}
