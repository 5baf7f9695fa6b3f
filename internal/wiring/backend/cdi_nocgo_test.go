//go:build !cgo

package backend_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/internal/wiring/backend"
)

// Without cgo there is no nvml backend and no generator for it.
func TestNVCDI(t *testing.T) {
	if _, err := backend.NVCDI(backend.CDIOptions{}); !errors.Is(err, backend.ErrNoNVCDI) {
		t.Fatalf("NVCDI = %v; want ErrNoNVCDI", err)
	}
}
