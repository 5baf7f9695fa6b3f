package reservation_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

func TestValidateRequests(t *testing.T) {
	two := []reservation.Allocation{alloc(0, 0, gpuA, "1g.5gb", 0, 1), alloc(0, 1, gpuA, "1g.5gb", 1, 1)}
	tests := []struct {
		name     string
		allocs   []reservation.Allocation
		requests []int
		// bad are the entries that fail, with the field named.
		bad   []int
		field string
	}{
		{name: "no entries, no requests", allocs: nil, requests: nil},
		{name: "exact match", allocs: two, requests: []int{2}},
		{name: "pod requests nothing", allocs: two, requests: nil, bad: []int{0, 1}, field: "containerIndex"},
		{name: "container requests zero", allocs: two, requests: []int{0, 2}, bad: []int{0, 1}, field: "containerIndex"},
		{name: "other container requests", allocs: two[:1], requests: []int{0, 1}, bad: []int{0}, field: "containerIndex"},
		{name: "container beyond the spec", allocs: []reservation.Allocation{alloc(3, 0, gpuA, "1g.5gb", 0, 1)}, requests: []int{1}, bad: []int{0}, field: "containerIndex"},
		{name: "fewer entries than requested", allocs: two[:1], requests: []int{2}, bad: []int{0}, field: "deviceIndex"},
		{name: "more entries than requested", allocs: two, requests: []int{1}, bad: []int{0, 1}, field: "deviceIndex"},
		{name: "device index beyond the request", allocs: []reservation.Allocation{alloc(0, 1, gpuA, "1g.5gb", 0, 1)}, requests: []int{1}, bad: []int{0}, field: "deviceIndex"},
		{name: "huge request, one entry", allocs: two[:1], requests: []int{1 << 40}, bad: []int{0}, field: "deviceIndex"},
		{name: "second container matches, first does not", allocs: append(slices.Clone(two), alloc(1, 0, gpuB, "1g.5gb", 0, 1)),
			requests: []int{3, 1}, bad: []int{0, 1}, field: "deviceIndex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := reservation.ValidateRequests(tt.allocs, tt.requests)
			if len(tt.bad) == 0 {
				if err != nil {
					t.Fatalf("ValidateRequests = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, reservation.ErrNotRequested) || !errors.Is(err, reservation.ErrInvalid) {
				t.Fatalf("ValidateRequests = %v, want ErrNotRequested and ErrInvalid", err)
			}
			var got []int
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ve *reservation.ValidationError
				if !errors.As(e, &ve) {
					t.Fatalf("problem %v is not a *ValidationError", e)
				}
				if ve.Field != tt.field {
					t.Errorf("entry %d field %q, want %q", ve.Index, ve.Field, tt.field)
				}
				got = append(got, ve.Index)
			}
			if !slices.Equal(got, tt.bad) {
				t.Fatalf("failing entries %v, want %v", got, tt.bad)
			}
		})
	}
}

func TestValidateRequestsBoundsProblems(t *testing.T) {
	allocs := make([]reservation.Allocation, 500)
	for i := range allocs {
		allocs[i] = alloc(i, 0, gpuA, "1g.5gb", 0, 1)
	}
	err := reservation.ValidateRequests(allocs, nil)
	if got := len(err.(interface{ Unwrap() []error }).Unwrap()); got != reservation.MaxProblems {
		t.Fatalf("%d problems, want MaxProblems (%d)", got, reservation.MaxProblems)
	}
}

func TestPodReleased(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		pod  reservation.Pod
		now  time.Time
		want bool
	}{
		{name: "running", pod: reservation.Pod{Phase: reservation.PodRunning}, now: now, want: false},
		{name: "succeeded", pod: reservation.Pod{Phase: reservation.PodSucceeded}, now: now, want: true},
		{name: "failed", pod: reservation.Pod{Phase: reservation.PodFailed}, want: true},
		{name: "deleting, containers running, grace left", pod: reservation.Pod{Phase: reservation.PodRunning, Deleting: true,
			DeletionDeadline: now.Add(time.Second)}, now: now, want: false},
		{name: "deleting, deadline reached", pod: reservation.Pod{Phase: reservation.PodRunning, Deleting: true,
			DeletionDeadline: now}, now: now, want: true},
		{name: "deleting, deadline passed", pod: reservation.Pod{Phase: reservation.PodRunning, Deleting: true,
			DeletionDeadline: now.Add(-time.Second)}, now: now, want: true},
		{name: "deleting, time unknown", pod: reservation.Pod{Phase: reservation.PodRunning, Deleting: true,
			DeletionDeadline: now.Add(-time.Hour)}, want: false},
		{name: "deleting, deadline unknown", pod: reservation.Pod{Phase: reservation.PodRunning, Deleting: true}, now: now, want: false},
		{name: "deleting, containers terminated", pod: reservation.Pod{Phase: reservation.PodRunning, Deleting: true,
			ContainersTerminated: true, DeletionDeadline: now.Add(time.Hour)}, now: now, want: true},
		{name: "terminated but not deleting (restart policy may rerun)", pod: reservation.Pod{Phase: reservation.PodRunning,
			ContainersTerminated: true}, now: now, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.pod.Released(tt.now); got != tt.want {
				t.Fatalf("Released(%v) = %v, want %v", tt.now, got, tt.want)
			}
		})
	}
}

// A deleting pod keeps its reservations until Released: its containers may
// still run through the grace period.
func TestDesiredDeletingPods(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	deleting := func(uid string, deadline time.Time, terminated bool) reservation.Pod {
		p := pod(uid, reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 2, 2), migA, 4, 0))
		p.Deleting, p.DeletionDeadline, p.ContainersTerminated = true, deadline, terminated
		return p
	}
	tests := []struct {
		name     string
		pod      reservation.Pod
		now      time.Time
		wantKept bool
	}{
		{name: "grace left", pod: deleting("d", now.Add(30*time.Second), false), now: now, wantKept: true},
		{name: "grace over", pod: deleting("d", now.Add(-time.Second), false), now: now, wantKept: false},
		{name: "listing time unknown", pod: deleting("d", now.Add(-time.Second), false), wantKept: true},
		{name: "containers terminated", pod: deleting("d", now.Add(30*time.Second), true), now: now, wantKept: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := reservation.Desired(reservation.Snapshot{Complete: true, Now: tt.now, Pods: []reservation.Pod{tt.pod}})
			_, kept := set.Lookup("d", 0, 0)
			if kept != tt.wantKept || !set.Authorized {
				t.Fatalf("kept %v authorised %v, want kept %v, authorised", kept, set.Authorized, tt.wantKept)
			}
			if got := set.Claimed(gpuA, capability.Placement{Start: 2, Size: 2}); got != tt.wantKept {
				t.Fatalf("Claimed = %v, want %v", got, tt.wantKept)
			}
		})
	}
}

// Entries failing the trust rule are withheld and reported in Untrusted;
// they conflict with no one and do not withhold authorisation, and the
// pod's other entries stay active.
func TestDesiredTrustRule(t *testing.T) {
	victim := pod("victim", reservation.PodRunning, realized(alloc(0, 0, gpuA, "2g.10gb", 2, 2), migA, 4, 0))
	// The squatter's container 0 requests one device; its record adds a
	// second container that requests none, overlapping the victim.
	squatter := pod("squat", reservation.PodPending, alloc(0, 0, gpuB, "1g.5gb", 0, 1), alloc(1, 0, gpuA, "1g.5gb", 2, 1))
	squatter.DeviceRequests = []int{1}
	set := reservation.Desired(reservation.Snapshot{Complete: true, Pods: []reservation.Pod{victim, squatter}})
	if !set.Authorized || len(set.Reasons) != 0 || len(set.Unknown) != 0 {
		t.Fatalf("authorised %v, reasons %v, unknown %v; want authorised", set.Authorized, set.Reasons, set.Unknown)
	}
	if got, want := uids(set.Active), []string{"squat", "victim"}; !slices.Equal(got, want) {
		t.Fatalf("active %v, want %v", got, want)
	}
	if len(set.Withheld) != 1 || set.Withheld[0].PodUID != "squat" || set.Withheld[0].ContainerIndex != 1 {
		t.Fatalf("withheld %v, want the squatter's container 1 entry", set.Withheld)
	}
	if len(set.Untrusted) != 1 {
		t.Fatalf("untrusted %v, want one report", set.Untrusted)
	}
	var pe *reservation.PodError
	if !errors.As(set.Untrusted[0], &pe) || pe.Index != 1 || pe.Pod.UID != "squat" || !errors.Is(pe, reservation.ErrNotRequested) {
		t.Fatalf("untrusted report %v, want the squatter's entry 1, ErrNotRequested", set.Untrusted[0])
	}
	if _, ok := set.Lookup("squat", 1, 0); ok {
		t.Fatalf("an entry the container does not request is active")
	}
}

// The trust rule runs on every pod of every listing: on a valid record of
// a pod with few containers it does not allocate.
func TestValidateRequestsDoesNotAllocate(t *testing.T) {
	allocs := []reservation.Allocation{alloc(0, 0, gpuA, "1g.5gb", 0, 1), alloc(0, 1, gpuA, "1g.5gb", 1, 1), alloc(2, 0, gpuB, "2g.10gb", 2, 2)}
	requests := []int{2, 0, 1}
	if got := testing.AllocsPerRun(100, func() {
		if reservation.ValidateRequests(allocs, requests) != nil {
			t.Fatal("valid record refused")
		}
	}); got != 0 {
		t.Fatalf("ValidateRequests allocates %.0f times per call, want 0", got)
	}
}
