// Package policy is the Cedar gate that decides whether the exact text an agent
// produced may be released to the caller (action "respond").
//
// # Files
//
// Load reads, relative to the project's pinned directory descriptor, every file
// whose name ends in ".cedar" in policies/, then every such file in
// policies/mcp-server/, each directory in byte order of the names. Other names
// (such as policies/symbi.cedarschema) are ignored. Every path component is opened
// with openat and O_NOFOLLOW; nothing is resolved by name from the current
// directory.
//
// # Modes
//
//   - default: neither directory holds a .cedar file (or policies/ does not
//     exist). The built-in default permits respond.
//   - cedar: every file was read and parsed and together they hold at least one
//     policy. Decisions come from Cedar.
//   - deny_all: something configured could not be used; every decision is a deny
//     and Set.Reason says why. Causes: policies/ or policies/mcp-server that is a
//     symbolic link or not a directory; an entry named *.cedar that is a symbolic
//     link (dangling or not), a directory or anything but a regular file; a file
//     with more than one hard link; a file that cannot be opened or read; a file
//     that is not valid UTF-8; a malformed file; two policies with the same id;
//     files that hold no policy at all; and the limits: more than 1,024 entries in
//     one directory, a file over 1 MiB, more than 16 MiB of policy text in total.
//
// # Policy ids
//
// A policy's id is the value of its @id annotation, else "<file>:<line>:<column>"
// of its first character, where <file> is the relative name such as
// "policies/respond.cedar". Ids are unique within a set.
//
// # Entity model (the public contract policies are written against)
//
//	principal  Agent::"<declared agent name>" with attributes
//	             agent_id       String       UUIDv5 (URL namespace) of "symbi://response/<name>"
//	             file           String       the agent's file, relative to the project
//	             capabilities   Set<String>  the declared capabilities
//	             source_sha256  String       hex SHA-256 of the whole agent file
//	action     Action::"respond"
//	resource   Response::"<run id>"
//	context    surface             String  "mcp-server"
//	           mode                String  "text_response"
//	           response            String  the exact text of the answer
//	           response_bytes      Long    its length in bytes
//	           source_sha256       String  as on the principal
//	           declaration_sha256  String  hex SHA-256 of the selected declaration
//
// A delegated agent's tool call or file access is the action Action::"use_tool" on the
// resource Tool::"<ACP kind>" (ToolKinds), by the same principal, with the context
// surface, caller, run_id, title, paths (relative to the workspace), top_dirs (see
// ToolUse.TopDirs), workspace and raw_input_sha256. A path outside the workspace, an
// unknown kind or a request without a tool is denied before Cedar.
//
// The same model is written as a Cedar schema in policies/symbi.cedarschema.
//
// # Decisions
//
// Decisions fail closed. Any evaluation error of any policy is a deny, even when
// a permit matched: Cedar itself skips a forbid whose condition errors, which
// would otherwise let a broad permit allow. A request without an agent name or a
// run id is a deny. With no error, a matching forbid denies, else a matching
// permit allows, else the request is denied.
//
// # Digest
//
// Set.Digest is the lowercase hex SHA-256 of the concatenation, over the files in
// load order (Set.Files), of
//
//	name || 0x00 || len(content) as 8 bytes big-endian || content
//
// where name is the relative name ("policies/mcp-server/x.cedar"). In default
// mode there are no files and the digest is the SHA-256 of the empty string. In
// deny_all mode a file that could not be read whole (not openable, not a
// regular file, over the size limit) contributes its name and a length of
// 2^64-1 with no content, so the digest still names what was seen.
//
// A Set is immutable after Load and safe for concurrent use.
package policy

import (
	"fmt"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/google/uuid"
)

// Mode is how a Set decides.
type Mode string

// The three modes.
const (
	ModeDefault Mode = "default"  // no policy files: the built-in permit of respond
	ModeCedar   Mode = "cedar"    // decisions come from the loaded Cedar policies
	ModeDenyAll Mode = "deny_all" // the configured policies are unusable: deny everything
)

// Directories, relative to the project root, in load order.
const (
	Dir          = "policies"
	SurfaceDir   = "policies/mcp-server"
	surfaceEntry = "mcp-server"
	// AccessDir holds the run-access policies, a set of their own (LoadAccess): Load
	// does not read it.
	AccessDir   = "policies/access"
	accessEntry = "access"
)

// Limits on what Load reads.
const (
	MaxDirEntries = 1024     // entries inspected per directory
	MaxFileBytes  = 1 << 20  // bytes per policy file
	MaxTotalBytes = 16 << 20 // bytes over all policy files
)

// Set is the loaded policy configuration of a project.
type Set struct {
	Mode     Mode
	Digest   string    // see the package comment for the byte layout
	Reason   string    // why the mode is deny_all; "" otherwise
	Files    []string  // relative names, in load order
	Problems []Problem // every unusable file or directory, in load order (deny_all only)

	policies []Policy
	compiled []*cedar.Policy // parallel to policies
	// mentions are the actions some policy's scope names (every action for a policy
	// whose scope is the bare "action"): access sets only.
	mentions  map[string]bool
	anyAction bool
}

// Policy describes one loaded policy.
type Policy struct {
	ID     string // the @id annotation, else "file:line:col"
	File   string // relative name of the file that holds it
	Line   int
	Column int
	Effect string // "permit" or "forbid"
	Gate   string // GateHuman for a gated forbid, else ""
}

// GateHuman is the one gate: a forbid annotated @gate("human") holds what it denies for a
// person's decision (approve_run) instead of denying it outright.
const GateHuman = "human"

// Problem is one reason a configured file or directory could not be used.
type Problem struct {
	File    string // relative name
	Line    int    // 0 when the problem has no position
	Column  int
	Message string
}

// String renders the problem as "file:line:col: message", or "file: message"
// when there is no position.
func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s", p.File, p.Line, p.Column, p.Message)
	}
	return fmt.Sprintf("%s: %s", p.File, p.Message)
}

// PolicyIDs returns the ids of the loaded policies, in load order.
func (s *Set) PolicyIDs() []string {
	ids := make([]string, len(s.policies))
	for i, p := range s.policies {
		ids[i] = p.ID
	}
	return ids
}

// Policies returns a description of the loaded policies, in load order.
func (s *Set) Policies() []Policy {
	return append([]Policy(nil), s.policies...)
}

// AgentID is the stable principal id of a declared agent name: the UUIDv5 in the
// URL namespace of "symbi://response/<name>".
func AgentID(name string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("symbi://response/"+name)).String()
}
