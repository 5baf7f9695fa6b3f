package reservationtest

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/reservation"
)

// Codec is an allocation-value codec under test: a strict reader and a
// writer.
type Codec struct {
	// Read decodes value and checks it as a device plugin must before
	// trusting it: the wire rules, the contract's semantic rules and the
	// trust rule against the pod's device requests. It returns the
	// entries in array order, or an error matching the sentinels of
	// package reservation with errors.Is.
	Read func(value []byte, deviceRequests []int) ([]reservation.Allocation, error)
	// Write encodes entries as the annotation value.
	Write func(allocs []reservation.Allocation) []byte
}

// Strict is this module's codec: reservation.Decode, then
// reservation.Validate and reservation.ValidateRequests; reservation.Encode.
func Strict() Codec {
	return Codec{
		Read: func(value []byte, deviceRequests []int) ([]reservation.Allocation, error) {
			allocs, err := reservation.Decode(value)
			if err != nil {
				return nil, err
			}
			if err := reservation.Validate(allocs); err != nil {
				return nil, err
			}
			if err := reservation.ValidateRequests(allocs, deviceRequests); err != nil {
				return nil, err
			}
			return allocs, nil
		},
		Write: reservation.Encode,
	}
}

// CheckRecord checks c on a valid record: Write gives exactly the reference
// bytes ([WireEncode]), Read of them gives the record's entries in order
// without error, and the empty value reads as no entries.
func CheckRecord(c Codec, r Record) error {
	want := r.Value()
	if got := string(c.Write(slices.Clone(r.Allocations))); got != want {
		return fmt.Errorf("the writer is not byte compatible:\n got %s\nwant %s\nrecord %s", got, want, r)
	}
	got, err := c.Read([]byte(want), slices.Clone(r.DeviceRequests))
	if err != nil {
		return fmt.Errorf("the reader refused a valid value: %w\nvalue %s\nrecord %s", err, want, r)
	}
	if len(got) != len(r.Allocations) || (len(got) > 0 && !slices.Equal(got, r.Allocations)) {
		return fmt.Errorf("the reader gave %v\nwant %s", got, r)
	}
	if empty, err := c.Read(nil, r.DeviceRequests); err != nil || len(empty) != 0 {
		return fmt.Errorf("the reader, given the empty value = %v, %v; want no entries", empty, err)
	}
	return nil
}

// CheckMutant checks that c's reader refuses m with m.Want.
func CheckMutant(c Codec, m Mutant) error {
	got, err := c.Read([]byte(m.Value), slices.Clone(m.DeviceRequests))
	switch {
	case err == nil:
		return fmt.Errorf("the reader accepted %s\ngot %v", m, got)
	case !errors.Is(err, m.Want):
		return fmt.Errorf("the reader refused with %v, want an error matching %v: %s", err, m.Want, m)
	}
	return nil
}

// Property returns the suite as a rapid property: a record from
// [RecordGen] through [CheckRecord], then a mutant from [MutantGen]
// through [CheckMutant].
func Property(c Codec) func(*rapid.T) {
	records, mutants := RecordGen(0), MutantGen()
	return func(t *rapid.T) {
		if err := CheckRecord(c, records.Draw(t, "record")); err != nil {
			t.Fatal(err)
		}
		if err := CheckMutant(c, mutants.Draw(t, "mutant")); err != nil {
			t.Fatal(err)
		}
	}
}

// Check runs [Property] with rapid.Check.
func Check(t *testing.T, c Codec) {
	t.Helper()
	rapid.Check(t, Property(c))
}
