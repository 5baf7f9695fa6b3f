package nvmlhal_test

import (
	"context"
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize"
)

var sentinels = []error{
	realize.ErrOccupied, realize.ErrInvalidPlacement, realize.ErrInUse, realize.ErrNotFound,
	realize.ErrMIGDisabled, realize.ErrNotSupported, realize.ErrResetRequired,
}

// checkKind asserts err matches want (nil: none of the sentinels), carries
// code through errors.As and errors.Is, and is a HardwareError naming op.
func checkKind(t *testing.T, err error, want error, code nvml.Return, op string, gpu int) {
	t.Helper()
	for _, s := range sentinels {
		if got := errors.Is(err, s); got != (s == want) {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, !got)
		}
	}
	var re *nvmlhal.ReturnError
	if !errors.As(err, &re) || re.Return != code {
		t.Errorf("errors.As(%v) code = %v, want %v", err, re, code)
	}
	if !errors.Is(err, code) {
		t.Errorf("errors.Is(%v, nvml code %d) = false", err, int(code))
	}
	var he *realize.HardwareError
	if !errors.As(err, &he) || he.Op != op || he.GPU != gpu {
		t.Errorf("HardwareError = %+v, want Op %q GPU %d", he, op, gpu)
	}
}

func TestErrorMappingOnCreate(t *testing.T) {
	for _, tc := range []struct {
		code nvml.Return
		want error
	}{
		{nvml.ERROR_INSUFFICIENT_RESOURCES, realize.ErrOccupied},
		{nvml.ERROR_INVALID_ARGUMENT, realize.ErrInvalidPlacement},
		{nvml.ERROR_IN_USE, realize.ErrInUse},
		{nvml.ERROR_NOT_FOUND, realize.ErrNotFound},
		{nvml.ERROR_NOT_SUPPORTED, realize.ErrNotSupported}, // MIG is on
		{nvml.ERROR_RESET_REQUIRED, realize.ErrResetRequired},
		{nvml.ERROR_NO_PERMISSION, nil},
		{nvml.ERROR_GPU_IS_LOST, nil},
		{nvml.ERROR_UNKNOWN, nil},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
			srv.FailNext(nvmlmock.OpCreateGpuInstance, tc.code)
			_, err := b.CreateInstance(context.Background(), 6, p2g, at(0, 2))
			checkKind(t, err, tc.want, tc.code, "CreateGpuInstanceWithPlacement", 6)
		})
	}
}

func TestErrorMappingOnDestroy(t *testing.T) {
	for _, tc := range []struct {
		code nvml.Return
		want error
	}{
		{nvml.ERROR_IN_USE, realize.ErrInUse},
		{nvml.ERROR_NOT_FOUND, realize.ErrNotFound},
		{nvml.ERROR_INVALID_ARGUMENT, nil}, // only a create makes it a placement error
		{nvml.ERROR_NO_PERMISSION, nil},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			b, srv := newBackend(t, nvmlmock.DGXH100, nvmlmock.Options{})
			inst := mustCreate(t, b, 4, p1g, at(3, 1))
			srv.FailNext(nvmlmock.OpDestroyComputeInstance, tc.code)
			err := b.DestroyComputeInstance(context.Background(), 4, inst.GIID, inst.ComputeInstances[0].ID)
			checkKind(t, err, tc.want, tc.code, "ComputeInstance.Destroy", 4)
		})
	}
}

func TestErrorMappingMIGDisabled(t *testing.T) {
	b, _ := newBackend(t, nvmlmock.DGXB200, nvmlmock.Options{MIGDisabled: true})
	err := b.DestroyGPUInstance(context.Background(), 7, 0)
	checkKind(t, err, realize.ErrMIGDisabled, nvml.ERROR_NOT_SUPPORTED, "GetGpuInstanceById", 7)
}

// ReturnError formats codes itself (never through the library), and tells
// codes apart, including ones it has no name for.
func TestReturnErrorTextDistinct(t *testing.T) {
	seen := make(map[string]nvml.Return)
	for _, code := range []nvml.Return{
		nvml.ERROR_INSUFFICIENT_RESOURCES, nvml.ERROR_IN_USE, nvml.ERROR_NOT_FOUND, nvml.ERROR_NOT_SUPPORTED,
		nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_RESET_REQUIRED, nvml.ERROR_UNKNOWN, nvml.Return(12345), nvml.Return(12346),
	} {
		text := (&nvmlhal.ReturnError{Return: code}).Error()
		if prev, dup := seen[text]; dup || text == "" {
			t.Errorf("code %d formats as %q, like code %d", int(code), text, int(prev))
		}
		seen[text] = code
	}
}
