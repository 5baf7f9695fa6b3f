package backend_test

import (
	"context"
	"errors"
	"flag"
	"reflect"
	"slices"
	"testing"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/wiring/backend"
	"github.com/dynmig/dynmig/realize"
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

func TestHealthCheckFlags(t *testing.T) {
	tests := []struct {
		name       string
		env        [2]string // DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS
		args       []string
		want       realize.HealthChecks
		wantErrAt  int // entry index of a *realize.HealthChecksError; -1: none
		wantSetter string
	}{
		{name: "defaults", wantErrAt: -1},
		{name: "from the environment", env: [2]string{"48, 63", "13"}, wantErrAt: -1,
			want: realize.HealthChecks{Disable: []uint64{48, 63}, Enable: []uint64{13}}},
		{name: "flags win over the environment", env: [2]string{"all", ""}, args: []string{"-disable-healthchecks=79"}, wantErrAt: -1,
			want: realize.HealthChecks{Disable: []uint64{79}}},
		{name: "malformed entry", args: []string{"-enable-healthchecks=79,x79"}, wantErrAt: 1, wantSetter: realize.EnvEnableHealthChecks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(realize.EnvDisableHealthChecks, tt.env[0])
			t.Setenv(realize.EnvEnableHealthChecks, tt.env[1])
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			checks := backend.HealthCheckFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := checks()
			var he *realize.HealthChecksError
			if tt.wantErrAt >= 0 {
				if !errors.As(err, &he) || !errors.Is(err, realize.ErrHealthChecks) || he.Index != tt.wantErrAt || he.Setting != tt.wantSetter {
					t.Fatalf("err = %v, want a HealthChecksError for %s entry %d", err, tt.wantSetter, tt.wantErrAt)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("checks = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
