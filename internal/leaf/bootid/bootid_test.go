package bootid_test

import (
	"errors"
	"os"
	"testing"

	"github.com/dynmig/dynmig/internal/leaf/bootid"
)

func TestRead(t *testing.T) {
	errSource := errors.New("unreadable")
	tests := []struct {
		name    string
		source  func() (string, error)
		want    string
		wantErr error
	}{
		{"trimmed", func() (string, error) { return " 6f1c\n", nil }, "6f1c", nil},
		{"empty", func() (string, error) { return "\n", nil }, "", bootid.ErrEmpty},
		{"source error", func() (string, error) { return "6f1c", errSource }, "", errSource},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := bootid.Read(tt.source)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Read: error %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("Read = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	if _, err := os.Stat(bootid.File); err != nil {
		t.Skipf("no %s here: %v", bootid.File, err)
	}
	id, err := bootid.Read(nil)
	if err != nil || id == "" {
		t.Fatalf("Read(nil) = %q, %v", id, err)
	}
}
