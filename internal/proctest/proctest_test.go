package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

func TestAliveAndStat(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	st, pgrp, comm, ok := Stat(os.Getpid())
	if !ok || st == 'Z' || pgrp != syscall.Getpgrp() || comm == "" {
		t.Fatalf("Stat(self) = %c, %d, %q, %v", st, pgrp, comm, ok)
	}
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	pid := cmd.Process.Pid
	if !Alive(pid) {
		t.Fatalf("a started child %d is not alive", pid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if Alive(pid) {
		t.Fatalf("a reaped child %d is alive", pid)
	}
}

func TestReadPID(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		content string
		want    int
	}{
		{"123\n", 123},
		{" 7 ", 7},
		{"0", 0},
		{"-5", 0},
		{"x", 0},
		{"", 0},
	} {
		p := filepath.Join(dir, "pid-"+strconv.Itoa(len(tt.content))+tt.content)
		if err := os.WriteFile(p, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPID(p)
		if got != tt.want || (err == nil) != (tt.want > 0) {
			t.Errorf("ReadPID(%q) = %d, %v; want %d", tt.content, got, err, tt.want)
		}
	}
	if _, err := ReadPID(filepath.Join(dir, "absent")); !os.IsNotExist(err) {
		t.Errorf("ReadPID of a missing file: %v", err)
	}
}
