package project_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"symbi/internal/project"
)

// ReadAt applies the confined reader's file rules to one name in a directory.
func TestReadAt(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ok.cedar", "permit")
	write("big.cedar", "0123456789")
	write("linked.cedar", "x")
	if err := os.Link(filepath.Join(dir, "linked.cedar"), filepath.Join(dir, "other")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok.cedar", filepath.Join(dir, "sym.cedar")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.cedar"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	tests := []struct {
		name  string
		limit int64
		rule  error
	}{
		{"ok.cedar", 6, nil},
		{"big.cedar", 9, project.ErrTooLarge},
		{"linked.cedar", 10, project.ErrHardLink},
		{"sym.cedar", 10, project.ErrSymlink},
		{"sub.cedar", 10, project.ErrNotRegular},
		{"missing.cedar", 10, project.ErrNotExist},
		{"../ok.cedar", 10, project.ErrBadPath},
		{"..", 10, project.ErrBadPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := project.ReadAt(int(d.Fd()), tt.name, "policies/"+tt.name, tt.limit)
			if tt.rule == nil {
				if err != nil || string(data) != "permit" {
					t.Fatalf("got %q, %v", data, err)
				}
				return
			}
			if !errors.Is(err, tt.rule) {
				t.Fatalf("err %v, want rule %v", err, tt.rule)
			}
		})
	}
}
