package backend_test

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/dynmig/dynmig/internal/wiring/backend"
	"github.com/dynmig/dynmig/internal/wiring/cli"
)

// TestCheckDriverRoot: -driver-root must name an existing directory; a
// missing path, a file and an empty value are flag errors naming
// -driver-root, matching ErrDriverRoot and the cause.
func TestCheckDriverRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fset := flag.NewFlagSet("t", flag.ContinueOnError)
	def := backend.DriverRootFlag(fset)
	tests := []struct {
		name, root string
		cause      error // nil: accepted
	}{
		{"default", *def, nil},
		{"directory", dir, nil},
		{"missing", filepath.Join(dir, "absent"), fs.ErrNotExist},
		{"file", file, backend.ErrDriverRoot},
		{"empty", "", backend.ErrDriverRoot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := backend.CheckDriverRoot(tt.root)
			if tt.cause == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *cli.FlagError
			if !errors.As(err, &fe) || fe.Flag != "driver-root" || !errors.Is(err, backend.ErrDriverRoot) || !errors.Is(err, tt.cause) || !cli.IsUsage(err) {
				t.Fatalf("CheckDriverRoot(%q) = %v; want a usage error of -driver-root matching ErrDriverRoot and %v", tt.root, err, tt.cause)
			}
		})
	}
}
