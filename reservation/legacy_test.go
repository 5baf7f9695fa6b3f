package reservation_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/reservation"
)

func TestParseLegacyDevices(t *testing.T) {
	tests := []struct {
		name  string
		value string
		want  []reservation.LegacyDevice
	}{
		{name: "empty", value: ""},
		{name: "hami-core devices only", value: gpuA + ",NVIDIA,4000,30:" + gpuB + ",NVIDIA,4000,30:;"},
		{
			name:  "v2.9 MIG devices in two containers",
			value: gpuA + "[0-1],NVIDIA,9984,28:;;" + gpuA + ",NVIDIA,100,0:" + gpuB + "[2-10],NVIDIA,4864,14:;",
			want: []reservation.LegacyDevice{
				{ContainerIndex: 0, DeviceIndex: 0, ID: gpuA + "[0-1]", GPUUUID: gpuA, Geometry: 0, Slot: 1},
				{ContainerIndex: 2, DeviceIndex: 1, ID: gpuB + "[2-10]", GPUUUID: gpuB, Geometry: 2, Slot: 10},
			},
		},
		{
			name:  "bracketed but not numeric",
			value: gpuA + "[x],NVIDIA,1,1:",
			want:  []reservation.LegacyDevice{{ID: gpuA + "[x]", GPUUUID: gpuA, Geometry: -1, Slot: -1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := reservation.ParseLegacyDevices(tt.value)
			if len(got) != len(tt.want) {
				t.Fatalf("ParseLegacyDevices = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("device %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("error = %v, want nil", err)
				}
				return
			}
			var le *reservation.LegacyError
			if !errors.Is(err, reservation.ErrLegacyIdentifier) || !errors.As(err, &le) || le.Device != tt.want[0] {
				t.Fatalf("error = %v, want a *LegacyError for %+v", err, tt.want[0])
			}
		})
	}
}

func TestIsLegacyIdentifier(t *testing.T) {
	for in, want := range map[string]bool{
		gpuA + "[1-2]": true,
		gpuA:           false,
		"GPU-[1-2]":    false,
		migA:           false,
		gpuA + "[1-2":  false,
		"":             false,
	} {
		if got := reservation.IsLegacyIdentifier(in); got != want {
			t.Errorf("IsLegacyIdentifier(%q) = %v, want %v", in, got, want)
		}
	}
}
