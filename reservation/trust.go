package reservation

import (
	"errors"
	"strconv"
)

// ErrNotRequested: an entry reserves a device for a container that does
// not request it: the container requests none of the device plugin's
// resource, fewer devices than the entry's deviceIndex implies, or a
// number of devices the container's entries do not match exactly. It is a
// validation problem (matched together with [ErrInvalid]).
var ErrNotRequested = errors.New("reservation: device not requested by the container")

// ValidateRequests applies the trust rule of the reservation contract to
// one pod's decoded entries: an entry counts only for a container that
// requests the MIG resource with the matching device count. deviceRequests
// holds, per containerIndex, the number of devices the container requests
// ([Pod.DeviceRequests]; nil means none). A container c with
// deviceRequests[c] == n > 0 must have exactly n entries with device
// indexes 0..n-1; then all of them count. Every other entry fails: one of
// a container that requests nothing (Field "containerIndex"), or one of a
// container whose entries do not match its request (Field "deviceIndex").
//
// The annotation is writable by anyone who may update the pod, while the
// container's request is part of its immutable spec, checked by the API
// server's quota and admission and the reason the kubelet calls the device
// plugin at all. An entry that fails this rule was never requested, so
// the device plugin never realizes it and the scheduler never counts it.
//
// It returns nil, or the errors.Join of one [*ValidationError] per failing
// entry, in entry order, each matching [ErrInvalid] and [ErrNotRequested],
// at most [MaxProblems] of them. Call it on entries that passed
// [Validate]: duplicates and negative indexes are Validate's to report,
// and here only make a container's entries fail.
func ValidateRequests(allocs []Allocation, deviceRequests []int) error {
	if len(allocs) == 0 {
		return nil
	}
	var errs []error
	var small [8]containerMatch // per container, computed once: most pods have few containers
	var more map[int]containerMatch
	for i := range allocs {
		c := allocs[i].ContainerIndex
		n := 0
		if c >= 0 && c < len(deviceRequests) {
			n = deviceRequests[c]
		}
		var err *ValidationError
		if n <= 0 {
			err = &ValidationError{Index: i, Other: -1, Field: "containerIndex", Problem: ErrNotRequested,
				Detail: "container " + strconv.Itoa(c) + " requests no MIG device"}
		} else {
			var m containerMatch
			switch {
			case c < len(small) && small[c].known:
				m = small[c]
			case c < len(small):
				m = matchContainer(allocs, c, n)
				small[c] = m
			default:
				var ok bool
				if m, ok = more[c]; !ok {
					m = matchContainer(allocs, c, n)
					if more == nil {
						more = make(map[int]containerMatch)
					}
					more[c] = m
				}
			}
			if !m.ok {
				err = &ValidationError{Index: i, Other: -1, Field: "deviceIndex", Problem: ErrNotRequested,
					Detail: "container " + strconv.Itoa(c) + " requests " + strconv.Itoa(n) +
						" MIG devices; the record holds " + strconv.Itoa(m.entries) + " entries for it, not exactly device indexes 0.." + strconv.Itoa(n-1)}
			}
		}
		if err != nil {
			if errs = append(errs, err); len(errs) >= MaxProblems {
				break
			}
		}
	}
	return joinProblems(errs)
}

type containerMatch struct {
	entries int  // entries of the container
	ok      bool // they are exactly device indexes 0..n-1
	known   bool // computed
}

// matchContainer checks container c's entries against its request of n
// devices. Its memory is bounded by the number of entries, whatever n.
func matchContainer(allocs []Allocation, c, n int) containerMatch {
	m := containerMatch{known: true}
	for _, a := range allocs {
		if a.ContainerIndex == c {
			m.entries++
		}
	}
	if m.entries != n {
		return m
	}
	var stack [16]bool
	var seen []bool
	if n <= len(stack) {
		seen = stack[:n]
	} else {
		seen = make([]bool, n)
	}
	for _, a := range allocs {
		if a.ContainerIndex != c {
			continue
		}
		if a.DeviceIndex < 0 || a.DeviceIndex >= n || seen[a.DeviceIndex] {
			return m
		}
		seen[a.DeviceIndex] = true
	}
	m.ok = true
	return m
}
