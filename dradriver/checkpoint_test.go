package dradriver_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/reservation"
)

func sampleCheckpoint() dradriver.Checkpoint {
	p := dradriver.Partition{GPUUUID: testUUID, Profile: "2g.12gb", Placement: capability.Placement{Start: 2, Size: 2}}
	const name = "mig-6b813aea-996a-440d-ab86-4736b86702bf-2g12gb-2-2"
	return dradriver.Checkpoint{Claims: []dradriver.PreparedClaim{{
		UID: "uid-1", Namespace: "default", Name: "c1",
		Devices: []dradriver.PreparedDevice{{
			Request: "gpu/small", Device: name, ContainerIndex: 0, DeviceIndex: 0, Partition: p,
			Runtime:   reservation.RuntimeIdentity{MIGUUID: "MIG-0c4b5a3e-8f1d-4a7b-9c2e-1d3f5a7b9c0e", GPUInstanceID: 5, ComputeInstanceID: 0},
			CDIDevice: dradriver.CDIKind + "=uid-1-" + name,
		}},
	}}}
}

func TestCheckpointRoundTrip(t *testing.T) {
	want := sampleCheckpoint()
	path := filepath.Join(t.TempDir(), dradriver.CheckpointFile)
	if got, err := dradriver.ReadCheckpoint(path); err != nil || len(got.Claims) != 0 {
		t.Fatalf("missing file: %v, %v; want empty, nil", got, err)
	}
	if err := dradriver.WriteCheckpoint(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := dradriver.ReadCheckpoint(path)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("read back %+v, %v; want %+v", got, err, want)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want only the checkpoint (no temporary files)", entries, err)
	}
}

func TestDecodeCheckpointRejects(t *testing.T) {
	const dev = `"device":"mig-6b813aea-996a-440d-ab86-4736b86702bf-2g12gb-2-2"`
	const rt = `"migUUID":"MIG-0c4b5a3e-8f1d-4a7b-9c2e-1d3f5a7b9c0e","gpuInstanceID":5,"computeInstanceID":0`
	for _, tc := range []struct {
		name          string
		data          string
		claim, device int
	}{
		{name: "not JSON", data: `{`, claim: -1, device: -1},
		{name: "unknown field", data: `{"version":1,"claims":[],"extra":1}`, claim: -1, device: -1},
		{name: "wrong version", data: `{"version":2,"claims":[]}`, claim: -1, device: -1},
		{name: "trailing data", data: `{"version":1,"claims":[]} {}`, claim: -1, device: -1},
		{name: "empty UID", data: `{"version":1,"claims":[{"uid":"","namespace":"","name":"","devices":[]}]}`, claim: 0, device: -1},
		{name: "repeated UID", data: `{"version":1,"claims":[{"uid":"a","namespace":"","name":"","devices":[]},{"uid":"a","namespace":"","name":"","devices":[]}]}`, claim: 1, device: -1},
		{name: "bad device name", data: `{"version":1,"claims":[{"uid":"a","namespace":"","name":"","devices":[{"request":"r","device":"gpu-0","containerIndex":0,"deviceIndex":0,` + rt + `,"cdiDevice":""}]}]}`, claim: 0, device: 0},
		{name: "repeated index", data: `{"version":1,"claims":[{"uid":"a","namespace":"","name":"","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,` + rt + `,"cdiDevice":""},{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,` + rt + `,"cdiDevice":""}]}]}`, claim: 0, device: 1},
		{name: "bad MIG UUID", data: `{"version":1,"claims":[{"uid":"a","namespace":"","name":"","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,"migUUID":"GPU-x","gpuInstanceID":5,"computeInstanceID":0,"cdiDevice":""}]}]}`, claim: 0, device: 0},
	} {
		_, err := dradriver.DecodeCheckpoint("ck", []byte(tc.data))
		var ce *dradriver.CheckpointError
		if !errors.Is(err, dradriver.ErrCheckpoint) || !errors.As(err, &ce) || ce.Claim != tc.claim || ce.Device != tc.device {
			t.Errorf("%s: %v, want a *CheckpointError at claims[%d] devices[%d]", tc.name, err, tc.claim, tc.device)
		}
	}
}

// FuzzDecodeCheckpoint: whatever decodes encodes to content that decodes
// to the same checkpoint.
func FuzzDecodeCheckpoint(f *testing.F) {
	data, err := dradriver.EncodeCheckpoint(sampleCheckpoint())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"version":1,"claims":[]}`))
	f.Add([]byte(`{"version":1,"claims":[{"uid":"a","namespace":"n","name":"c","devices":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ck, err := dradriver.DecodeCheckpoint("fuzz", data)
		if err != nil {
			if !errors.Is(err, dradriver.ErrCheckpoint) {
				t.Fatalf("error %v does not match ErrCheckpoint", err)
			}
			return
		}
		again, err := dradriver.EncodeCheckpoint(ck)
		if err != nil {
			t.Fatal(err)
		}
		back, err := dradriver.DecodeCheckpoint("fuzz", again)
		if err != nil || !reflect.DeepEqual(back, ck) {
			t.Fatalf("re-decoded %+v, %v; want %+v", back, err, ck)
		}
	})
}
