package placement_test

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func a100Node(t testing.TB, n int) []capability.GPU {
	out := make([]capability.GPU, n)
	for i := range out {
		out[i] = plainGPU(t, "A100-SXM4-40GB", i)
	}
	return out
}

func res(gpu, profile string, start, size uint32) placement.Reservation {
	return placement.Reservation{GPUUUID: gpu, Profile: profile, Placement: capability.Placement{Start: start, Size: size}}
}

func used(t *testing.T, l *placement.Ledger, node string, gpu int) placement.Occupancy {
	t.Helper()
	gs, ok := l.Node(node)
	if !ok {
		t.Fatalf("node %q unknown", node)
	}
	return gs[gpu].Used
}

func TestLedgerPodLifecycle(t *testing.T) {
	gpus := a100Node(t, 2)
	g0, g1 := gpus[0].UUID, gpus[1].UUID
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n1", gpus); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name     string
		run      func() error
		wantErr  error
		wantUsed [2]placement.Occupancy
	}{
		{name: "add pod a", run: func() error {
			return l.AddPod("n1", "a", []placement.Reservation{res(g0, "2g.10gb", 2, 2), {DeviceIndex: 1, GPUUUID: g1, Profile: "1g.5gb", Placement: capability.Placement{Start: 6, Size: 1}}})
		}, wantUsed: [2]placement.Occupancy{0b1100, 0b1000000}},
		{name: "update pod a", run: func() error {
			return l.UpdatePod("n1", "a", []placement.Reservation{res(g0, "3g.20gb", 4, 4)})
		}, wantUsed: [2]placement.Occupancy{0b11110000, 0}},
		{name: "add pod b", run: func() error {
			return l.AddPod("n1", "b", []placement.Reservation{res(g0, "1g.5gb", 0, 1)})
		}, wantUsed: [2]placement.Occupancy{0b11110001, 0}},
		{name: "conflicting pod c is recorded and reported", run: func() error {
			return l.AddPod("n1", "c", []placement.Reservation{res(g0, "2g.10gb", 0, 2)})
		}, wantErr: placement.ErrConflict, wantUsed: [2]placement.Occupancy{0b11110011, 0}},
		{name: "delete b keeps c's slot 0", run: func() error {
			l.DeletePod("b")
			return nil
		}, wantUsed: [2]placement.Occupancy{0b11110011, 0}},
		{name: "delete c frees slots 0-1", run: func() error {
			l.DeletePod("c")
			return nil
		}, wantUsed: [2]placement.Occupancy{0b11110000, 0}},
		{name: "delete a empties the node", run: func() error {
			if !l.DeletePod("a") {
				return errors.New("pod a not found")
			}
			return nil
		}, wantUsed: [2]placement.Occupancy{0, 0}},
	}
	for _, s := range steps {
		err := s.run()
		if !errors.Is(err, s.wantErr) || (s.wantErr == nil && err != nil) {
			t.Fatalf("%s: err = %v, want %v", s.name, err, s.wantErr)
		}
		for g := range 2 {
			if got := used(t, l, "n1", g); got != s.wantUsed[g] {
				t.Fatalf("%s: GPU %d used = %v, want %v", s.name, g, got, s.wantUsed[g])
			}
		}
	}
	if c := l.Conflicts(); len(c) != 0 {
		t.Fatalf("conflicts left: %v", c)
	}
}

func TestLedgerConflictsListed(t *testing.T) {
	gpus := a100Node(t, 1)
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n1", gpus); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "a", []placement.Reservation{res(gpus[0].UUID, "3g.20gb", 0, 4)}); err != nil {
		t.Fatal(err)
	}
	err := l.AddPod("n1", "b", []placement.Reservation{res(gpus[0].UUID, "1g.5gb", 2, 1)})
	var ce *placement.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 {
		t.Fatalf("err = %v, want one conflict", err)
	}
	want := placement.Conflict{Node: "n1", GPUUUID: gpus[0].UUID, PodUID: "b", Other: "a",
		Placement: capability.Placement{Start: 2, Size: 1}, OtherPlacement: capability.Placement{Start: 0, Size: 4}}
	if got := ce.Conflicts[0]; got != want {
		t.Fatalf("conflict = %+v, want %+v", got, want)
	}
	if got := l.Conflicts(); len(got) != 1 || got[0].PodUID != "a" || got[0].Other != "b" {
		t.Fatalf("Conflicts() = %v, want a vs b", got)
	}
}

func TestLedgerRejects(t *testing.T) {
	gpus := a100Node(t, 1)
	g0 := gpus[0].UUID
	tests := []struct {
		name    string
		assume  bool
		rs      []placement.Reservation
		wantErr error
		// recorded: whether the slots end up taken
		recorded bool
	}{
		{name: "unknown GPU", rs: []placement.Reservation{res("GPU-nope", "1g.5gb", 0, 1)}, wantErr: placement.ErrInvalidReservation},
		{name: "unpublished placement observed", rs: []placement.Reservation{res(g0, "2g.10gb", 1, 2)}, wantErr: placement.ErrInvalidReservation, recorded: true},
		{name: "unpublished placement assumed", assume: true, rs: []placement.Reservation{res(g0, "2g.10gb", 1, 2)}, wantErr: placement.ErrInvalidReservation},
		{name: "unknown profile", rs: []placement.Reservation{res(g0, "5g.30gb", 0, 4)}, wantErr: placement.ErrInvalidReservation, recorded: true},
		// An observed pod holds its slots whatever the table says (a
		// narrower table is only an allowlist change), so even slots past
		// the grid count; an assumed one is refused.
		{name: "outside the grid observed", rs: []placement.Reservation{res(g0, "1g.5gb", 8, 1)}, wantErr: placement.ErrInvalidReservation, recorded: true},
		{name: "outside the grid assumed", assume: true, rs: []placement.Reservation{res(g0, "1g.5gb", 8, 1)}, wantErr: placement.ErrInvalidReservation},
		{name: "past any grid", rs: []placement.Reservation{res(g0, "1g.5gb", 64, 1)}, wantErr: placement.ErrInvalidReservation},
		{name: "repeated device", rs: []placement.Reservation{res(g0, "1g.5gb", 0, 1), res(g0, "1g.5gb", 1, 1)}, wantErr: placement.ErrInvalidReservation},
		// Entries are kept with int32 indexes, the wire format's range.
		{name: "container index over int32", rs: []placement.Reservation{{ContainerIndex: math.MaxInt32 + 1, GPUUUID: g0, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}}, wantErr: placement.ErrInvalidReservation},
		{name: "device index over int32", rs: []placement.Reservation{{DeviceIndex: math.MaxInt32 + 1, GPUUUID: g0, Profile: "1g.5gb", Placement: capability.Placement{Start: 0, Size: 1}}}, wantErr: placement.ErrInvalidReservation},
		{name: "overlap within the pod", rs: []placement.Reservation{res(g0, "1g.5gb", 0, 1), {DeviceIndex: 1, GPUUUID: g0, Profile: "2g.10gb", Placement: capability.Placement{Start: 0, Size: 2}}}, wantErr: placement.ErrInvalidReservation, recorded: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := placement.NewLedger(placement.LedgerOptions{})
			if err := l.SetNode("n1", gpus); err != nil {
				t.Fatal(err)
			}
			var err error
			if tc.assume {
				err = l.Assume("n1", "p", tc.rs)
			} else {
				err = l.AddPod("n1", "p", tc.rs)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got := used(t, l, "n1", 0) != 0; got != tc.recorded {
				t.Fatalf("slots taken = %v, want %v", got, tc.recorded)
			}
		})
	}
}

func TestLedgerReserveForgetConfirm(t *testing.T) {
	gpus := a100Node(t, 1)
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n1", gpus); err != nil {
		t.Fatal(err)
	}
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 2, Memory: placement.MiB(19000)}}}
	as, err := l.Reserve("n1", "p", req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := used(t, l, "n1", 0), placement.Occupancy(0xff); got != want {
		t.Fatalf("used = %v, want %v", got, want)
	}
	if _, err := l.Reserve("n1", "p", req); !errors.Is(err, placement.ErrPodExists) {
		t.Fatalf("second Reserve err = %v, want ErrPodExists", err)
	}
	if _, err := l.Reserve("n1", "q", oneDevice(1000)); !errors.Is(err, placement.ErrCapacity) {
		t.Fatalf("Reserve on a full GPU err = %v, want ErrCapacity", err)
	}
	if !l.Forget("p") {
		t.Fatal("Forget of an assumed pod = false")
	}
	if got := used(t, l, "n1", 0); got != 0 {
		t.Fatalf("after Forget used = %v, want {}", got)
	}
	// Assume, confirm by AddPod, then Forget must not drop it.
	if err := l.Assume("n1", "p", placement.Reservations("p", as)); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "p", placement.Reservations("p", as)); err != nil {
		t.Fatal(err)
	}
	if l.Forget("p") {
		t.Fatal("Forget dropped a confirmed pod")
	}
	rs, assumed, ok := l.Pod("p")
	if !ok || assumed || len(rs) != 2 {
		t.Fatalf("Pod(p) = %v, %v, %v; want 2 confirmed reservations", rs, assumed, ok)
	}
	if _, err := l.Reserve("nope", "z", req); !errors.Is(err, placement.ErrUnknownNode) {
		t.Fatalf("unknown node err = %v", err)
	}
}

func TestLedgerSetNodeRebuilds(t *testing.T) {
	gpus := a100Node(t, 1)
	l := placement.NewLedger(placement.LedgerOptions{})
	// Pods may arrive before the node registration.
	err := l.AddPod("n1", "a", []placement.Reservation{res(gpus[0].UUID, "2g.10gb", 4, 2)})
	if !errors.Is(err, placement.ErrInvalidReservation) {
		t.Fatalf("AddPod before SetNode err = %v, want ErrInvalidReservation", err)
	}
	if err := l.SetNode("n1", gpus); err != nil {
		t.Fatal(err)
	}
	if got, want := used(t, l, "n1", 0), placement.Occupancy(0b110000); got != want {
		t.Fatalf("used = %v, want %v", got, want)
	}
	bad := gpus[0]
	bad.UUID = ""
	if err := l.SetNode("n2", []capability.GPU{bad}); !errors.Is(err, placement.ErrInvalidGrid) {
		t.Fatalf("SetNode with an empty UUID err = %v", err)
	}
	if err := l.SetNode("n3", []capability.GPU{gpus[0], gpus[0]}); !errors.Is(err, placement.ErrInvalidGrid) {
		t.Fatalf("SetNode with a repeated UUID err = %v", err)
	}
	if _, err := l.Reserve("n1", "z", &placement.Request{Containers: []placement.ContainerRequest{{Devices: 8}}}); !errors.Is(err, placement.ErrCapacity) {
		t.Fatalf("8 whole GPUs on one: err = %v", err)
	}
	l.RemoveNode("n1")
	if _, _, ok := l.Pod("a"); ok {
		t.Fatal("pod survived RemoveNode")
	}
}

// TestLedgerConcurrentReserve has many goroutines reserve, evaluate,
// forget and delete on a few nodes at once (run with -race). Afterwards no
// two pods may hold overlapping slots and the occupancy must equal the
// union of the surviving reservations.
func TestLedgerConcurrentReserve(t *testing.T) {
	l := placement.NewLedger(placement.LedgerOptions{})
	nodes := []string{"n0", "n1", "n2"}
	for i, n := range nodes {
		gpus := a100Node(t, 2)
		for g := range gpus {
			gpus[g].UUID = fmt.Sprintf("GPU-%d-%d", i, g)
		}
		if err := l.SetNode(n, gpus); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for k := range 200 {
				uid := fmt.Sprintf("w%d-%d", w, k)
				node := nodes[(w+k)%len(nodes)]
				req := oneDevice(uint64(4000 + 5000*(k%4)))
				_, _ = l.Evaluate(node, req)
				if _, err := l.Reserve(node, uid, req); err != nil {
					if !errors.Is(err, placement.ErrUnschedulable) {
						t.Errorf("Reserve: %v", err)
					}
					continue
				}
				switch k % 3 {
				case 0:
					l.Forget(uid)
				case 1:
					l.DeletePod(fmt.Sprintf("w%d-%d", w, k-1))
				}
			}
		})
	}
	wg.Wait()
	if c := l.Conflicts(); len(c) != 0 {
		t.Fatalf("concurrent reservations overlap: %v", c)
	}
	for _, n := range nodes {
		gs, _ := l.Node(n)
		want := make([]placement.Occupancy, len(gs))
		for w := range 8 {
			for k := range 200 {
				rs, _, ok := l.Pod(fmt.Sprintf("w%d-%d", w, k))
				if !ok {
					continue
				}
				for _, r := range rs {
					for g := range gs {
						if gs[g].Grid.UUID() == r.GPUUUID {
							want[g] = want[g].Take(r.Placement)
						}
					}
				}
			}
		}
		for g := range gs {
			if gs[g].Used != want[g] {
				t.Fatalf("node %s GPU %d used %v, reservations %v", n, g, gs[g].Used, want[g])
			}
		}
	}
}

// Evaluate is a scheduler's Filter and Score for every node of every pod:
// a fitting node costs no allocation, and an unknown node is named.
func TestLedgerEvaluate(t *testing.T) {
	l := placement.NewLedger(placement.LedgerOptions{})
	gpus := a100Node(t, 8)
	if err := l.SetNode("n1", gpus); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "a", []placement.Reservation{res(gpus[0].UUID, "3g.20gb", 4, 4)}); err != nil {
		t.Fatal(err)
	}
	req := oneDevice(9000)
	score, err := l.Evaluate("n1", req)
	if err != nil || score < 0 || score > placement.MaxNodeScore {
		t.Fatalf("Evaluate = %d, %v; want a score in [0,%d]", score, err, placement.MaxNodeScore)
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = l.Evaluate("n1", req) }); a != 0 && !raceEnabled {
		t.Errorf("Evaluate allocates %v times per call, want 0", a)
	}
	if _, _, ok := l.Pod("a"); !ok {
		t.Error("Evaluate dropped pod a")
	}
	if gs, _ := l.Node("n1"); gs[0].Used != 0b11110000 || gs[1].Used != 0 {
		t.Errorf("Evaluate changed occupancy: %v %v", gs[0].Used, gs[1].Used)
	}
	if _, err := l.Evaluate("nope", req); !errors.Is(err, placement.ErrUnknownNode) {
		t.Errorf("Evaluate on an unknown node = %v, want ErrUnknownNode", err)
	}
}

// TestLedgerHolds: Holds agrees with Pod, order aside, and compares every
// field of every entry.
func TestLedgerHolds(t *testing.T) {
	gpus := a100Node(t, 2)
	g0, g1 := gpus[0].UUID, gpus[1].UUID
	a, b := res(g0, "1g.5gb", 0, 1), res(g1, "3g.20gb", 4, 4)
	b.DeviceIndex = 1
	l := placement.NewLedger(placement.LedgerOptions{})
	if err := l.SetNode("n1", gpus); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "p", []placement.Reservation{a, b}); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPod("n1", "empty", nil); err != nil {
		t.Fatal(err)
	}
	withUID := func(r placement.Reservation, uid string) placement.Reservation { r.PodUID = uid; return r }
	moved := b
	moved.Placement.Start = 0
	otherContainer := a
	otherContainer.ContainerIndex = 1
	tests := []struct {
		name string
		pod  string
		rs   []placement.Reservation
		want bool
	}{
		{name: "same", pod: "p", rs: []placement.Reservation{a, b}, want: true},
		{name: "other order", pod: "p", rs: []placement.Reservation{b, a}, want: true},
		{name: "with the pod's UID", pod: "p", rs: []placement.Reservation{withUID(a, "p"), b}, want: true},
		{name: "another pod's UID", pod: "p", rs: []placement.Reservation{withUID(a, "q"), b}},
		{name: "fewer", pod: "p", rs: []placement.Reservation{a}},
		{name: "more", pod: "p", rs: []placement.Reservation{a, b, res(g1, "1g.5gb", 0, 1)}},
		{name: "moved", pod: "p", rs: []placement.Reservation{a, moved}},
		{name: "other container", pod: "p", rs: []placement.Reservation{otherContainer, b}},
		{name: "other profile", pod: "p", rs: []placement.Reservation{res(g0, "1g.10gb", 0, 1), b}},
		{name: "other GPU", pod: "p", rs: []placement.Reservation{res(g1, "1g.5gb", 0, 1), b}},
		{name: "recorded without entries", pod: "empty", want: true},
		{name: "unknown pod, none", pod: "nope", want: true},
		{name: "unknown pod, some", pod: "nope", rs: []placement.Reservation{a}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.Holds(tc.pod, tc.rs); got != tc.want {
				t.Fatalf("Holds(%q, %v) = %v, want %v", tc.pod, tc.rs, got, tc.want)
			}
		})
	}
}
