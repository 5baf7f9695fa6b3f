package atomicfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/dynmig/dynmig/internal/leaf/atomicfile"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{"first", "second, longer than the first"} {
		if err := atomicfile.Write(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, %v; want 0600", st.Mode(), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory holds %v, %v; want the file alone (no temporary file left)", entries, err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "x"), nil, 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

func TestDecodeJSON(t *testing.T) {
	type v struct {
		A int `json:"a"`
	}
	tests := []struct {
		in      string
		wantErr bool
	}{
		{`{"a":1}`, false},
		{` {"a":1} `, false},
		{`{"a":1,"b":2}`, true},
		{`{"a":1}{}`, true},
		{`{"a":1} x`, true},
		{``, true},
		{`{"a":"1"}`, true},
	}
	for _, tt := range tests {
		var out v
		err := atomicfile.DecodeJSON([]byte(tt.in), &out)
		if (err != nil) != tt.wantErr {
			t.Errorf("DecodeJSON(%q) = %v, want error %v", tt.in, err, tt.wantErr)
		}
	}
	var out v
	if err := atomicfile.DecodeJSON([]byte(`{}{}`), &out); !errors.Is(err, atomicfile.ErrTrailingData) {
		t.Errorf("trailing data: %v, want ErrTrailingData", err)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"a":1}{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out struct {
			A int `json:"a"`
		}
		_ = atomicfile.DecodeJSON(data, &out) // never panics
	})
}
