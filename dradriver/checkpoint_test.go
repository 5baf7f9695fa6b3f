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
	return dradriver.Checkpoint{BootID: "0f6c1a52-3d0e-4b7e-9a55-2c1d8e4f6a70", Claims: []dradriver.PreparedClaim{{
		UID: "uid-1", Namespace: "default", Name: "c1", State: dradriver.PrepareCompleted,
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
		{name: "wrong version", data: `{"version":3,"claims":[]}`, claim: -1, device: -1},
		{name: "boot ID in version 1", data: `{"version":1,"bootID":"b","claims":[]}`, claim: -1, device: -1},
		{name: "state in version 1", data: `{"version":1,"claims":[{"uid":"a","namespace":"","name":"","state":"PrepareStarted","devices":[]}]}`, claim: 0, device: -1},
		{name: "no state", data: `{"version":2,"claims":[{"uid":"a","namespace":"","name":"","devices":[]}]}`, claim: 0, device: -1},
		{name: "unknown state", data: `{"version":2,"claims":[{"uid":"a","namespace":"","name":"","state":"Done","devices":[]}]}`, claim: 0, device: -1},
		{name: "started with an identity", data: `{"version":2,"claims":[{"uid":"a","namespace":"","name":"","state":"PrepareStarted","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,` + rt + `,"cdiDevice":""}]}]}`, claim: 0, device: 0},
		{name: "completed without an identity", data: `{"version":2,"claims":[{"uid":"a","namespace":"","name":"","state":"PrepareCompleted","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,"migUUID":"","gpuInstanceID":0,"computeInstanceID":0,"cdiDevice":""}]}]}`, claim: 0, device: 0},
		{name: "admin access with an identity", data: `{"version":2,"claims":[{"uid":"a","namespace":"","name":"","state":"PrepareCompleted","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,"adminAccess":true,` + rt + `,"cdiDevice":""}]}]}`, claim: 0, device: 0},
		{name: "two claims hold one device", data: `{"version":2,"claims":[{"uid":"a","namespace":"","name":"","state":"PrepareStarted","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,"migUUID":"","gpuInstanceID":0,"computeInstanceID":0,"cdiDevice":""}]},{"uid":"b","namespace":"","name":"","state":"PrepareStarted","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,"migUUID":"","gpuInstanceID":0,"computeInstanceID":0,"cdiDevice":""}]}]}`, claim: 1, device: 0},
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

// TestDecodeCheckpointVersion1: a version 1 file (no boot ID, no states)
// is read as completed claims; an admin-access device may share another
// claim's device.
func TestDecodeCheckpointVersions(t *testing.T) {
	const dev = `"device":"mig-6b813aea-996a-440d-ab86-4736b86702bf-2g12gb-2-2"`
	const rt = `"migUUID":"MIG-0c4b5a3e-8f1d-4a7b-9c2e-1d3f5a7b9c0e","gpuInstanceID":5,"computeInstanceID":0`
	v1 := `{"version":1,"claims":[{"uid":"a","namespace":"n","name":"c","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,` + rt + `,"cdiDevice":""}]}]}`
	ck, err := dradriver.DecodeCheckpoint("ck", []byte(v1))
	if err != nil || ck.BootID != "" || len(ck.Claims) != 1 || ck.Claims[0].State != dradriver.PrepareCompleted {
		t.Errorf("version 1: %+v, %v; want one completed claim, no boot ID", ck, err)
	}
	admin := `{"version":2,"bootID":"b","claims":[{"uid":"a","namespace":"","name":"","state":"PrepareCompleted","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,` + rt + `,"cdiDevice":""}]},` +
		`{"uid":"b","namespace":"","name":"","state":"PrepareCompleted","devices":[{"request":"r",` + dev + `,"containerIndex":0,"deviceIndex":0,"adminAccess":true,"migUUID":"","gpuInstanceID":0,"computeInstanceID":0,"cdiDevice":""}]}]}`
	ck, err = dradriver.DecodeCheckpoint("ck", []byte(admin))
	if err != nil || len(ck.Claims) != 2 || !ck.Claims[1].Devices[0].AdminAccess {
		t.Errorf("admin access beside a holder: %+v, %v; want both claims", ck, err)
	}
	if pc, _, held := ck.Holds(ck.Claims[0].Devices[0].Partition, "b"); !held || pc.UID != "a" {
		t.Errorf("Holds = %v, %t; want claim a (admin access holds nothing)", pc, held)
	}
	if _, _, held := ck.Holds(ck.Claims[0].Devices[0].Partition, "a"); held {
		t.Error("Holds counts an admin-access device")
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
	f.Add([]byte(`{"version":2,"bootID":"b","claims":[{"uid":"a","namespace":"n","name":"c","state":"PrepareStarted","devices":[]}]}`))
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
