package reservationtest_test

import (
	"bytes"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/reservation/reservationtest"
)

// This module's codecs pass their suites.
func TestStrictCodec(t *testing.T) {
	reservationtest.Check(t, reservationtest.Strict())
}

func TestStrictRegistrationCodec(t *testing.T) {
	reservationtest.CheckRegistrationCodec(t, reservationtest.StrictRegistration(), fakehal.Tables())
}

// Every mutation is drawn and refused, not only the common ones.
func TestEveryMutationRefused(t *testing.T) {
	seen := map[string]bool{}
	gen := reservationtest.MutantGen()
	for seed := 0; seed < 3000 && len(seen) < len(reservationtest.MutationNames()); seed++ {
		m := gen.Example(seed)
		seen[m.Name] = true
		if err := reservationtest.CheckMutant(reservationtest.Strict(), m); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range reservationtest.MutationNames() {
		if !seen[n] {
			t.Errorf("mutation %q never drawn", n)
		}
	}
}

// Generated records are valid and trusted by this module's own rules.
func TestRecordsValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := reservationtest.RecordGen(0).Draw(t, "record")
		if err := reservation.Validate(r.Allocations); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
		if err := reservation.ValidateRequests(r.Allocations, r.DeviceRequests); err != nil {
			t.Fatalf("%v\n%s", err, r)
		}
	})
}

func TestRegistrationsValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		devs := reservationtest.RegistrationGen(fakehal.Tables()).Draw(t, "registration")
		if err := capability.ValidateNodeRegistration(devs); err != nil {
			t.Fatal(err)
		}
	})
}

// Broken codecs fail the suite.
func TestBrokenCodecsFail(t *testing.T) {
	strict := reservationtest.Strict()
	codecs := map[string]reservationtest.Codec{
		"lenient reader (decode only)": {Read: func(v []byte, _ []int) ([]reservation.Allocation, error) {
			return reservation.Decode(v)
		}, Write: strict.Write},
		"ignores the trust rule": {Read: func(v []byte, _ []int) ([]reservation.Allocation, error) {
			a, err := reservation.Decode(v)
			if err == nil {
				err = reservation.Validate(a)
			}
			return a, err
		}, Write: strict.Write},
		"tolerates unknown keys": {Read: func(v []byte, reqs []int) ([]reservation.Allocation, error) {
			a, err := reservation.DecodeWithOptions(v, reservation.DecodeOptions{AllowUnknownKeys: true})
			if err != nil {
				return nil, err
			}
			return strict.Read([]byte(reservation.EncodeString(a)), reqs)
		}, Write: strict.Write},
		"writer without HTML escaping": {Read: strict.Read, Write: func(a []reservation.Allocation) []byte {
			b := reservation.Encode(a)
			for _, r := range []struct{ esc, raw string }{{`\u003c`, "<"}, {`\u003e`, ">"}, {`\u0026`, "&"}} {
				b = bytes.ReplaceAll(b, []byte(r.esc), []byte(r.raw))
			}
			return b
		}},
		"writer drops ID 0": {Read: strict.Read, Write: func(a []reservation.Allocation) []byte {
			c := append([]reservation.Allocation(nil), a...)
			for i := range c {
				if c[i].GPUInstanceID == reservation.SomeID(0) {
					c[i].GPUInstanceID = reservation.OptionalID{}
				}
			}
			return reservation.Encode(c)
		}},
		"reader sorts entries": {Read: func(v []byte, reqs []int) ([]reservation.Allocation, error) {
			a, err := strict.Read(v, reqs)
			if len(a) > 1 && a[0].ContainerIndex > a[len(a)-1].ContainerIndex {
				a[0], a[len(a)-1] = a[len(a)-1], a[0]
			}
			return a, err
		}, Write: strict.Write},
	}
	for name, c := range codecs {
		t.Run(name, func(t *testing.T) {
			if !fails(func(seed int) error {
				if err := reservationtest.CheckRecord(c, reservationtest.RecordGen(0).Example(seed)); err != nil {
					return err
				}
				return reservationtest.CheckMutant(c, reservationtest.MutantGen().Example(seed))
			}) {
				t.Fatal("the suite passed a broken codec")
			}
		})
	}
}

func TestBrokenRegistrationCodecsFail(t *testing.T) {
	strict := reservationtest.StrictRegistration()
	codecs := map[string]reservationtest.RegistrationCodec{
		"tolerant reader": {Read: func(v []byte) ([]capability.NodeDevice, error) {
			r, err := capability.ReadNodeRegistration(v)
			return r.Devices, err
		}, Write: strict.Write},
		"writer sorts devices": {Read: strict.Read, Write: func(d []capability.NodeDevice) ([]byte, error) {
			slices.SortFunc(d, func(a, b capability.NodeDevice) int { return a.Index - b.Index })
			return capability.EncodeNodeRegistration(d)
		}},
	}
	for name, c := range codecs {
		t.Run(name, func(t *testing.T) {
			if !fails(func(seed int) error {
				if err := reservationtest.CheckRegistration(c, reservationtest.RegistrationGen(fakehal.Tables()).Example(seed)); err != nil {
					return err
				}
				return reservationtest.CheckRegistrationMutant(c, reservationtest.RegistrationMutantGen(fakehal.Tables()).Example(seed))
			}) {
				t.Fatal("the suite passed a broken codec")
			}
		})
	}
}

func fails(check func(seed int) error) bool {
	for seed := range 500 {
		if err := check(seed); err != nil {
			return true
		}
	}
	return false
}

// Records drawn on shared GPUs are valid alone and, drawn for several
// pods, collide now and then: the point of RecordGenOn.
func TestRecordGenOnCollides(t *testing.T) {
	gpus := []string{"GPU-a", "GPU-b"}
	gen := reservationtest.RecordGenOn(gpus, 4)
	overlap, sameMIG := false, false
	for seed := range 300 {
		a, b := gen.Example(seed), gen.Example(seed+1000)
		for _, r := range []reservationtest.Record{a, b} {
			if err := reservation.Validate(r.Allocations); err != nil {
				t.Fatalf("%v\n%s", err, r)
			}
		}
		for _, x := range a.Allocations {
			for _, y := range b.Allocations {
				overlap = overlap || x.GPUUUID == y.GPUUUID && x.Placement.Overlaps(y.Placement)
				sameMIG = sameMIG || x.MIGUUID != "" && x.MIGUUID == y.MIGUUID
			}
		}
	}
	if !overlap || !sameMIG {
		t.Fatalf("no collision between records: overlap %v, same MIG UUID %v", overlap, sameMIG)
	}
}
