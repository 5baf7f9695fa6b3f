//go:build cgo

package backend_test

import (
	"testing"

	"github.com/dynmig/dynmig/internal/wiring/backend"
)

// With cgo the nvml backend's CDI generator is NVIDIA's library's; making
// it reads nothing, so it needs no driver.
func TestNVCDI(t *testing.T) {
	gen, err := backend.NVCDI(backend.CDIOptions{})
	if err != nil || gen == nil {
		t.Fatalf("NVCDI = %v, %v; want a generator", gen, err)
	}
}
