package project

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"symbi/internal/errcode"
)

// The starter project written by Init, as paths relative to the project.
var starterFiles = []struct{ rel, content string }{
	{"agents/assistant.symbi", `// assistant: a conversational agent created by "symbi init".
// Invoke it with the MCP tool invoke_agent and the name "assistant".
metadata {
    description = "Answers questions about this project in plain text",
    version = "0.1.0",
    executor = "orga"
}

agent assistant {
    capabilities = ["answer"]
    with timeout = 60.seconds {}
}
`},
	{"policies/respond.cedar", `// Every answer of an invoked agent must be permitted by a policy here.
// This one releases every text response; narrow it as the project grows.
@id("allow-respond")
permit(principal, action == Action::"respond", resource);
`},
	{"README.md", `# symbi project

Serve this project to an MCP client with ` + "`symbi mcp --project .`" + ` and call the tool
` + "`invoke_agent`" + ` with ` + "`{\"agent\": \"assistant\", \"prompt\": \"...\"}`" + `.
` + "`symbi agents list`" + ` shows the registered agents and why any is refused.

The model is chosen by the environment ` + "`symbi mcp`" + ` starts with:

| variable | for |
|---|---|
| ` + "`OPENAI_BASE_URL`" + ` | a local OpenAI-compatible model: Ollama (` + "`http://localhost:11434/v1`" + `), llama.cpp, vLLM, LM Studio; no key needed |
| ` + "`OPENAI_API_KEY`" + `, ` + "`CHAT_MODEL`" + ` | OpenAI (model default gpt-4o-mini) |
| ` + "`ANTHROPIC_API_KEY`" + `, ` + "`ANTHROPIC_MODEL`" + ` | Anthropic |
| ` + "`OPENROUTER_API_KEY`" + `, ` + "`OPENROUTER_MODEL`" + ` | OpenRouter |

Every answer is journaled in ` + "`.symbiont/governed/`" + ` and judged by ` + "`policies/`" + `.
` + "`.symbiont/`" + ` holds the project's private signing key: keep it out of version control
(` + "`.gitignore`" + ` does).
`},
}

// gitignoreEntry keeps the governed directory, with the private signing key, out of git.
const gitignoreEntry = ".symbiont/"

// starterAgentsMD is the hand-written part of the starter AGENTS.md; the generated
// section is appended to it.
const starterAgentsMD = `# AGENTS.md

Guidance for agents working in this project.

- Agent definitions live in agents/; policies for the respond gate in policies/.
- After changing agents/, run ` + "`symbi agents-md generate`" + ` and restart ` + "`symbi mcp`" + `.
- Never read or edit .symbiont/: it holds the run journals and the signing key.
`

// maxGitignoreBytes bounds the .gitignore init reads to add its line.
const maxGitignoreBytes = 1 << 20

// Init writes a starter project into dir (created if needed): one invocable agent,
// a policy permitting respond, AGENTS.md with its generated section, and a README.
// It changes nothing when any of those files already exists (or an agent file of the
// starter agent's stem with the other extension), when a .gitignore is there that is not
// a regular file of one link, or when the AGENTS.md it would write is over AgentsMDLimit
// (the starter files it wrote are then removed). It returns the paths it created,
// relative to dir.
func Init(dir string, log *slog.Logger) ([]string, error) {
	targets := []string{agentsMDName}
	for _, f := range starterFiles {
		targets = append(targets, f.rel)
	}
	// The starter agent's stem with the other extension: the two would be ambiguous.
	for _, rel := range append(targets, "agents/assistant.dsl") {
		_, err := os.Lstat(filepath.Join(dir, rel))
		if err == nil {
			return nil, errcode.Errorf(errcode.InvalidRequest, "init %s: %s already exists; nothing was changed", dir, rel)
		}
		if errors.Is(err, syscall.ENOTDIR) {
			// The project directory itself, or the agents/ or policies/ in it.
			what := dir
			if parent, _, nested := strings.Cut(rel, "/"); nested {
				if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
					what = parent
				}
			}
			return nil, errcode.Errorf(errcode.ProtectedPath, "init %s: %s is not a directory; nothing was changed", dir, what)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, errcode.Errorf(errcode.Internal, "init %s: %w", dir, err)
		}
	}
	// No link on the way to a file init writes (checked again as it writes, by createFile
	// and ensureIgnored): refused before anything is changed.
	for _, rel := range append(targets, ".gitignore") {
		parts := strings.Split(rel, "/")
		for i := range parts {
			sub := strings.Join(parts[:i+1], "/")
			if st, err := os.Lstat(filepath.Join(dir, sub)); err == nil && st.Mode()&fs.ModeSymlink != 0 {
				return nil, errcode.Errorf(errcode.ProtectedPath, "init %s: %s is a symbolic link; symbi does not write through one; nothing was changed", dir, sub)
			}
		}
	}
	if st, err := os.Lstat(filepath.Join(dir, ".gitignore")); err == nil {
		if err := checkGitignore(st); err != nil {
			return nil, err
		}
	}
	// The directories init makes, removed again if it gives up.
	var madeDirs []string
	for _, d := range []string{"agents", "policies"} {
		if _, err := os.Lstat(filepath.Join(dir, d)); errors.Is(err, fs.ErrNotExist) {
			madeDirs = append(madeDirs, d)
		}
	}
	// Everything is created beneath the project's directory, opened once, without
	// following a symbolic link in any component: a policies/ or .gitignore that is a
	// link leads elsewhere, and init writes nothing there.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errcode.Errorf(errcode.Internal, "init: %w", err)
	}
	rootFD, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, errcode.Errorf(errcode.Internal, "init: open %s: %w", dir, err)
	}
	defer unix.Close(rootFD)
	var created []string
	// giveUp removes what init wrote, for err: the project is as it was, and init can be
	// run again.
	giveUp := func(err error) ([]string, error) {
		for _, rel := range created {
			if rerr := removeFile(rootFD, rel); rerr != nil {
				return created, errors.Join(err, rerr)
			}
		}
		for _, d := range madeDirs {
			unix.Unlinkat(rootFD, d, unix.AT_REMOVEDIR) // only when empty: what init made
		}
		return nil, fmt.Errorf("%w; the starter files were removed", err)
	}
	for _, f := range starterFiles {
		if err := createFile(rootFD, f.rel, []byte(f.content)); err != nil {
			return giveUp(err)
		}
		created = append(created, f.rel)
	}
	md, err := starterAgentsMDFor(dir, log)
	if err != nil {
		return giveUp(err)
	}
	if err := createFile(rootFD, agentsMDName, md); err != nil {
		return giveUp(err)
	}
	created = append(created, agentsMDName)
	// The .gitignore last: a line appended to an existing one is not taken back, so no
	// write that could fail comes after it (a failed append leaves no half line).
	switch fresh, err := ensureIgnored(rootFD, ".gitignore"); {
	case err != nil:
		return giveUp(err)
	case fresh:
		created = append(created, ".gitignore")
	}
	return created, nil
}

// starterAgent is the registry name of the starter agent, agents/assistant.symbi.
const starterAgent = "assistant"

// starterAgentsMDFor generates the starter AGENTS.md of the project dir, with the agents
// it has (the starter's and any already in agents/), within AgentsMDLimit.
func starterAgentsMDFor(dir string, log *slog.Logger) ([]byte, error) {
	p, err := Open(dir)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	reg, err := p.LoadRegistry(log)
	if err != nil {
		return nil, err
	}
	// The starter must be invocable afterwards: among many agent files the registry may
	// not inspect or retain it.
	if _, err := reg.Resolve(starterAgent); err != nil {
		return nil, fmt.Errorf("init %s: the starter agent %s would not be invocable: %w", dir, starterAgent, err)
	}
	md, err := GenerateAgentsMD([]byte(starterAgentsMD), reg.Entries())
	if err != nil {
		return nil, err
	}
	if len(md) > AgentsMDLimit {
		return nil, errcode.Errorf(errcode.LimitExceeded, "init %s: AGENTS.md would be %d bytes with the %d agent files of agents/, limit %d", dir, len(md), len(reg.Entries()), AgentsMDLimit)
	}
	return md, nil
}

// checkGitignore refuses a .gitignore init would append to that is not a regular file of
// one link: a directory or FIFO, or a hard link to a file outside the project.
func checkGitignore(st fs.FileInfo) error {
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return errcode.Errorf(errcode.ProtectedPath, "init: .gitignore is not a regular file; nothing was changed")
	case sys == nil || sys.Nlink != 1:
		return errcode.Errorf(errcode.ProtectedPath, "init: .gitignore has more than one link (a hard link: the file may be outside the project); symbi does not write through one; nothing was changed")
	case st.Size() > maxGitignoreBytes:
		return errcode.Errorf(errcode.LimitExceeded, "init: .gitignore is larger than %d bytes; add %s to it by hand; nothing was changed", maxGitignoreBytes, gitignoreEntry)
	}
	return nil
}

// ensureIgnored makes the .gitignore rel beneath root list .symbiont/: it creates the
// file (created reports it), or appends the line to an existing one that lacks it. A
// .gitignore that is a symbolic link is refused.
func ensureIgnored(root int, rel string) (created bool, err error) {
	fd, err := unix.Openat(root, rel, unix.O_RDWR|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return true, createFile(root, rel, []byte("# symbi: run journals and the project's private signing key\n"+gitignoreEntry+"\n"))
	}
	if errors.Is(err, unix.ELOOP) {
		return false, errcode.Errorf(errcode.ProtectedPath, "init: %s is a symbolic link; symbi does not write through one", rel)
	}
	if err != nil {
		return false, errcode.Errorf(errcode.Internal, "init: %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, errcode.Errorf(errcode.Internal, "init: %s: %w", rel, err)
	}
	if err := checkGitignore(st); err != nil {
		return false, err
	}
	old, err := io.ReadAll(io.LimitReader(f, maxGitignoreBytes+1))
	if err != nil {
		return false, errcode.Errorf(errcode.Internal, "init: %w", err)
	}
	if len(old) > maxGitignoreBytes {
		return false, errcode.Errorf(errcode.LimitExceeded, "init: %s is larger than %d bytes; add %s to it by hand", rel, maxGitignoreBytes, gitignoreEntry)
	}
	ignored := false
	for _, line := range strings.Split(string(old), "\n") {
		// The line as git reads the pattern: a trailing CR and trailing spaces dropped,
		// nothing else — " .symbiont/" or ".symbiont/\t" ignores nothing. The last line
		// naming the directory decides: "!.symbiont/" after the entry re-includes it.
		l := strings.TrimRight(strings.TrimSuffix(line, "\r"), " ")
		negated := strings.HasPrefix(l, "!")
		switch strings.TrimPrefix(l, "!") {
		case gitignoreEntry, "/" + gitignoreEntry, ".symbiont", "/.symbiont":
			ignored = !negated
		}
	}
	if ignored {
		return false, nil
	}
	sep := ""
	if len(old) > 0 && old[len(old)-1] != '\n' {
		sep = "\n"
	}
	if _, err := f.WriteString(sep + gitignoreEntry + "\n"); err != nil {
		f.Truncate(int64(len(old))) // no half line left behind
		return false, errcode.Errorf(errcode.Internal, "init: %w", err)
	}
	// A file system may report a failed write only when the data is flushed (NFS at
	// close): flushed here, while the line can still be taken back.
	if err := f.Sync(); err != nil {
		f.Truncate(int64(len(old)))
		return false, errcode.Errorf(errcode.Internal, "init: %w", err)
	}
	if err := f.Close(); err != nil {
		return false, errcode.Errorf(errcode.Internal, "init: %w", err)
	}
	return false, nil
}

// createFile creates rel beneath root (and its parent directories, 0755) with content; it
// never replaces an existing file, and follows no symbolic link in any component.
func createFile(root int, rel string, content []byte) error {
	dfd, name, err := openParent(root, rel, true)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return errcode.Errorf(errcode.Internal, "init: create %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The file this call made, written in part: removed, so that init's giving up
		// leaves nothing behind (it removes only the files it wrote whole).
		unix.Unlinkat(dfd, name, 0)
		return errcode.Errorf(errcode.Internal, "init: %w", err) // "write REL: …", "close REL: …"
	}
	return nil
}

// openParent opens the directory of rel beneath root, following no symbolic link in any
// component (creating the missing ones, 0755, with mkdir), and returns it and rel's last
// component.
func openParent(root int, rel string, mkdir bool) (dfd int, name string, err error) {
	parts := strings.Split(rel, "/")
	dfd, err = unix.Dup(root)
	if err != nil {
		return -1, "", errcode.Errorf(errcode.Internal, "init: %w", err)
	}
	for _, d := range parts[:len(parts)-1] {
		if mkdir {
			if err := unix.Mkdirat(dfd, d, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(dfd)
				return -1, "", errcode.Errorf(errcode.Internal, "init: create %s: %w", d, err)
			}
		}
		next, err := unix.Openat(dfd, d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dfd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, "", errcode.Errorf(errcode.ProtectedPath, "init: %s: %s is a symbolic link or not a directory; symbi does not write through one", rel, d)
		}
		if err != nil {
			return -1, "", errcode.Errorf(errcode.Internal, "init: %s: %w", rel, err)
		}
		dfd = next
	}
	return dfd, parts[len(parts)-1], nil
}

// removeFile removes rel beneath root, as createFile made it, following no symbolic link.
func removeFile(root int, rel string) error {
	dfd, name, err := openParent(root, rel, false)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, name, 0); err != nil {
		return errcode.Errorf(errcode.Internal, "init: remove %s: %w", rel, err)
	}
	return nil
}
