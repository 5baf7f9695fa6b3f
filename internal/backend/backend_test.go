package backend_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/backend"
)

func TestParseFakeGPUs(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    []string
		wantErr bool
	}{
		{name: "count and model", value: "3x" + fakehal.DefaultModel, want: fakehal.Repeat(3, fakehal.DefaultModel)},
		{name: "list", value: "A30,A100-SXM4-40GB", want: []string{"A30", "A100-SXM4-40GB"}},
		{name: "one model", value: "A30", want: []string{"A30"}},
		{name: "zero", value: "0xA30", wantErr: true},
		{name: "negative", value: "-2xA30", wantErr: true},
		{name: "absurdly many", value: "99999999999xA30", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := backend.ParseFakeGPUs(tt.value)
			if tt.wantErr {
				if !errors.Is(err, backend.ErrFakeGPUs) {
					t.Errorf("ParseFakeGPUs(%q) = %v, %v; want ErrFakeGPUs", tt.value, got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("ParseFakeGPUs(%q) = %v, %v; want %v", tt.value, got, err, tt.want)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	hw, closeHW, err := backend.Open(ctx, "fake", "2xA30", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeHW()
	devs, err := hw.Devices(ctx)
	if err != nil || len(devs) != 2 {
		t.Errorf("fake backend devices = %d, %v; want 2", len(devs), err)
	}
	if _, _, err := backend.Open(ctx, "fake", "1xNoSuchGPU", nil); err == nil {
		t.Error("Open(fake, unknown model) succeeded")
	}
	if _, _, err := backend.Open(ctx, "", "", nil); !errors.Is(err, backend.ErrNoBackend) {
		t.Errorf("Open(\"\") = %v, want ErrNoBackend", err)
	}
	if _, _, err := backend.Open(ctx, "tpu", "", nil); !errors.Is(err, backend.ErrUnknown) {
		t.Errorf("Open(tpu) = %v, want ErrUnknown", err)
	}
	if !slices.Contains(backend.Names(), "fake") {
		t.Errorf("Names() = %v, want fake among them", backend.Names())
	}
}
