package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

func TestReadAllowlist(t *testing.T) {
	if a, err := readAllowlist(""); err != nil || len(a) != len(capability.DefaultAllowlist()) {
		t.Errorf("default: %v, %v", a, err)
	}
	file := filepath.Join(t.TempDir(), "device-config.yaml")
	if err := os.WriteFile(file, []byte("nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [1g.6gb]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := readAllowlist(file)
	if err != nil || len(a) != 1 || !slices.Equal(a[0].Profiles, []string{"1g.6gb"}) {
		t.Errorf("file: %v, %v; want the A30 entry", a, err)
	}
	if _, err := readAllowlist(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file: no error")
	}
}
