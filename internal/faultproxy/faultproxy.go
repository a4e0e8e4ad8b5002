// Package faultproxy builds a stand-in for a misbehaving symbi, for the tests of the
// harnesses that must notice one (symbi-demo, symbi-stress). Every command but a stdio
// "symbi mcp" is the real binary, exec'd in place; a stdio "symbi mcp" runs the real server
// as a child, forwards SIGTERM, SIGINT and SIGHUP to it, rewrites its stdout line by line
// (Old to New, the count of replacements written to the Hits file), and exits with the
// child's status or Exit. It changes nothing on disk: journals and the ledger are exactly
// what the real server wrote. It is for tests only.
package faultproxy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Fault is what the proxy changes of a stdio symbi mcp.
type Fault struct {
	Old, New string // replace Old with New in every line the server writes ("": none)
	Hits     string // the file the count of replacements is written to ("": none)
	Exit     *int   // the exit status the proxy gives instead of the server's (nil: the server's)
}

// Build builds the proxy into dir and returns its path. It needs only the standard
// library: no module is fetched.
func Build(dir string) (string, error) {
	src := filepath.Join(dir, "faultproxy-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module faultproxy\n\ngo 1.26\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(source), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "faultproxy")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the fault proxy: %v\n%s", err, out)
	}
	return bin, nil
}

// Script writes an executable "symbi" in dir that runs proxy over the real symbi with f,
// and returns its path.
func Script(dir, proxy, real string, f Fault) (string, error) {
	vars := []string{"SYMBI_TEST_PROXY_REAL=" + quote(real), "SYMBI_TEST_PROXY_OLD=" + quote(f.Old),
		"SYMBI_TEST_PROXY_NEW=" + quote(f.New), "SYMBI_TEST_PROXY_HITS=" + quote(f.Hits)}
	if f.Exit != nil {
		vars = append(vars, "SYMBI_TEST_PROXY_EXIT="+strconv.Itoa(*f.Exit))
	}
	path := filepath.Join(dir, "symbi")
	script := fmt.Sprintf("#!/bin/sh\n%s exec %s \"$@\"\n", strings.Join(vars, " "), quote(proxy))
	return path, os.WriteFile(path, []byte(script), 0o755)
}

// Hits is how many replacements the proxy made, as written to the file hits.
func Hits(hits string) int {
	b, _ := os.ReadFile(hits)
	n, _ := strconv.Atoi(string(b))
	return n
}

// quote quotes s for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// source is the proxy's program.
const source = `package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
)

func main() {
	real := os.Getenv("SYMBI_TEST_PROXY_REAL")
	args := os.Args[1:]
	old, repl := os.Getenv("SYMBI_TEST_PROXY_OLD"), os.Getenv("SYMBI_TEST_PROXY_NEW")
	exitCode := os.Getenv("SYMBI_TEST_PROXY_EXIT")
	stdio := len(args) > 0 && args[0] == "mcp" && !slices.Contains(args, "--http")
	if !stdio || (old == "" && exitCode == "") {
		err := syscall.Exec(real, append([]string{real}, args...), os.Environ())
		os.Stderr.WriteString("fault proxy: exec: " + err.Error() + "\n")
		os.Exit(127)
	}
	cmd := exec.Command(real, args...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	var out *bufio.Reader
	if old == "" {
		cmd.Stdout = os.Stdout
	} else {
		p, err := cmd.StdoutPipe()
		if err != nil {
			os.Exit(127)
		}
		out = bufio.NewReader(p)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		os.Stderr.WriteString("fault proxy: start: " + err.Error() + "\n")
		os.Exit(127)
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	if out != nil {
		hits := 0
		for {
			line, err := out.ReadBytes('\n')
			if n := bytes.Count(line, []byte(old)); n > 0 {
				hits += n
				line = bytes.ReplaceAll(line, []byte(old), []byte(repl))
				if f := os.Getenv("SYMBI_TEST_PROXY_HITS"); f != "" {
					os.WriteFile(f, []byte(strconv.Itoa(hits)), 0o644)
				}
			}
			os.Stdout.Write(line)
			if err != nil {
				break
			}
		}
	}
	cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if exitCode != "" {
		code, _ = strconv.Atoi(exitCode)
	}
	os.Exit(code)
}
`
