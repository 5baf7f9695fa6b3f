package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
)

func TestParseFakeGPUs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   string
		want    []string
		wantErr bool
	}{
		{name: "count and model", value: "3x" + fakehal.DefaultModel, want: fakehal.Repeat(3, fakehal.DefaultModel)},
		{name: "list", value: "A30,A100-SXM4-40GB", want: []string{"A30", "A100-SXM4-40GB"}},
		{name: "one model", value: "A30", want: []string{"A30"}},
		{name: "zero", value: "0xA30", wantErr: true},
		{name: "absurdly many", value: "99999999999xA30", wantErr: true},
	} {
		got, err := parseFakeGPUs(tc.value)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("%s: parseFakeGPUs(%q) = %v, %v; want %v, error %v", tc.name, tc.value, got, err, tc.want, tc.wantErr)
		}
	}
}

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
