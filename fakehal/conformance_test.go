package fakehal_test

import (
	"context"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize/realizetest"
)

// conformanceBackend is a node of two GPUs of model: GPU 0 idle and
// MIG-enabled for the suite, GPU 1 with MIG disabled for the MIG-disabled
// check.
func conformanceBackend(t *testing.T, model string) realizetest.Backend {
	n, err := fakehal.New(fakehal.Options{GPUs: fakehal.Repeat(2, model), Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.ForceMIGMode(1, capability.MIGDisabled); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Check(); err != nil {
			t.Errorf("Check() after the check: %v", err)
		}
	})
	return realizetest.Backend{
		Realizer: n,
		StartProcess: func(_ context.Context, gpu int, migUUID string) (func() error, error) {
			pid, err := n.StartProcess(gpu, migUUID)
			return func() error { return n.StopProcess(pid) }, err
		},
	}
}

// TestConformance runs the backend conformance suite on every built-in
// model: 4-slot A30, the 8-slot parts and the 12-slot RTX PRO 6000.
func TestConformance(t *testing.T) {
	for _, m := range fakehal.Models() {
		t.Run(m.Name, func(t *testing.T) {
			realizetest.TestRealizer(t, func(t *testing.T) realizetest.Backend {
				return conformanceBackend(t, m.Name)
			})
		})
	}
}
