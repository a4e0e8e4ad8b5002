// Package project serves the files of one symbi project directory: it pins the
// directory, reads files from it under confinement, takes the agent registry
// snapshot, and reads and regenerates AGENTS.md.
//
// # Pinning
//
// Open opens the project directory once, as a directory descriptor (O_DIRECTORY).
// Every later read resolves its path from that descriptor, so renaming, moving or
// replacing the directory afterwards cannot redirect reads.
//
// # Confined reads
//
// Read takes a relative path with "/" separators and refuses, each with its own rule
// (see the Err* sentinels):
//
//   - an empty path, an empty component ("a//b", trailing "/"), or a NUL byte;
//   - an absolute path;
//   - a ".." component;
//   - any component starting with "." (hidden; this covers .symbiont);
//   - a first component "policies";
//   - a symbolic link anywhere in the path, even one pointing inside the project;
//   - a file with more than one hard link;
//   - anything that is not a regular file (directory, FIFO, socket, device);
//   - content that is not valid UTF-8;
//   - more bytes than the caller's limit (exactly the limit is accepted).
//
// Resolution uses openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
// RESOLVE_NO_MAGICLINKS. Where openat2 is unavailable (ENOSYS, or EPERM from a
// sandbox) it falls back to a component-by-component walk with openat and O_NOFOLLOW,
// which enforces the same rules. Files are opened non-blocking, so a FIFO cannot hang
// the reader, and checked with fstat on the opened descriptor. Refusals carry the
// codes errcode.ProtectedPath, errcode.NotFound or errcode.LimitExceeded. The package
// is POSIX only (Linux for openat2).
//
// # Registry
//
// LoadRegistry takes the agent registry snapshot; see Registry.
//
// # AGENTS.md
//
// The generated section of AGENTS.md lies between the lines AutoStart and AutoEnd;
// GenerateAgentsMD replaces only that section and leaves every other byte intact.
package project

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// Project is an opened, pinned project directory.
type Project struct {
	path string
	root *os.File
	fd   int // root's descriptor, kept so reads need not call root.Fd
	// walk forces the component-by-component fallback instead of openat2.
	walk bool
}

// Open pins dir: it is opened once as a directory descriptor (O_DIRECTORY), and
// moving or replacing the directory later cannot redirect reads.
func Open(dir string) (*Project, error) {
	if dir == "" {
		// filepath.Abs would make it the working directory: not the project meant.
		return nil, errcode.Errorf(errcode.NotFound, "project directory not given (an empty path)")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, errcode.Errorf(errcode.NotFound, "project %s: %w", dir, err)
	}
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		switch err {
		case unix.ENOENT:
			return nil, errcode.Errorf(errcode.NotFound, "project directory %s does not exist", abs)
		case unix.ENOTDIR:
			return nil, errcode.Errorf(errcode.NotFound, "project %s is not a directory", abs)
		}
		return nil, errcode.Errorf(errcode.Internal, "project %s: %w", abs, err)
	}
	return &Project{path: abs, root: os.NewFile(uintptr(fd), abs), fd: fd}, nil
}

// Path returns the absolute path of the project at open time.
func (p *Project) Path() string { return p.path }

// Root returns the pinned directory descriptor. The caller must not close it.
func (p *Project) Root() *os.File { return p.root }

// Close releases the pinned directory descriptor.
func (p *Project) Close() error {
	if err := p.root.Close(); err != nil {
		return fmt.Errorf("close project %s: %w", p.path, err)
	}
	return nil
}
