//go:build cgo

package main

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/selfcheck"
)

// nvmlLibrary is the library `discover --nvml` reads; nil is the system's
// libnvidia-ml. Tests put a strict mock here.
var nvmlLibrary nvml.Interface

// discoverNVML prints the read-only self-check of this node's GPUs.
func discoverNVML(e *env) error {
	b := nvmlhal.New(nvmlhal.Options{NVML: nvmlLibrary})
	if err := b.Init(e.ctx); err != nil {
		return fmt.Errorf("NVML: %w (is the NVIDIA driver installed?)", err)
	}
	results, err := selfcheck.Check(e.ctx, b)
	err = errors.Join(err, b.Shutdown(e.ctx))
	if err != nil {
		return err
	}
	if err := selfcheck.Write(e.stdout, results); err != nil {
		return err
	}
	for _, r := range results {
		if !r.OK() {
			return errFindings
		}
	}
	return nil
}
