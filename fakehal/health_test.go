package fakehal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/realize"
)

// nextWithin reads the next event, failing the test if none comes before the binary's timeout.
func nextWithin(t *testing.T, w realize.HealthWatch) realize.HealthEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound())
	defer cancel()
	e, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return e
}

// noEvent checks that no event is pending.
func noEvent(t *testing.T, w realize.HealthWatch) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if e, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, %v; want no event (context.Canceled)", e, err)
	}
}

func TestHealthXidOnGPUAndMIGDevice(t *testing.T) {
	n := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, "A100-SXM4-40GB")})
	inst, err := n.AddInstance(1, 0, capability.Placement{Start: 0, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	mig := inst.ComputeInstances[0]
	w, err := n.WatchHealth(context.Background(), realize.HealthChecks{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	steps := []struct {
		name   string
		inject func() error
		want   *realize.HealthEvent // nil: no event
	}{
		{name: "application xid ignored", inject: func() error { return n.InjectXid(0, "", 13) }},
		{name: "mig device xid marks the instance", inject: func() error { return n.InjectXid(1, mig.MIGUUID, 94) },
			want: &realize.HealthEvent{GPU: 1, GI: inst.GIID, CI: mig.ID, Cause: realize.CauseXid, Xid: 94}},
		{name: "gpu xid marks the gpu", inject: func() error { return n.InjectXid(0, "", 79) },
			want: &realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79}},
		{name: "second xid on unhealthy gpu is no transition", inject: func() error { return n.InjectXid(0, "", 48) }},
		{name: "recovery", inject: func() error { return n.Recover(0) },
			want: &realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: true, Cause: realize.CauseRecovered}},
		{name: "double-bit ecc", inject: func() error { return n.InjectECC(0, "") },
			want: &realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseDoubleBitECC}},
		{name: "recovering gpu 1 heals its mig device", inject: func() error { return n.Recover(1) },
			want: &realize.HealthEvent{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: true, Cause: realize.CauseRecovered}},
	}
	for _, s := range steps {
		if err := s.inject(); err != nil {
			t.Fatalf("%s: inject: %v", s.name, err)
		}
		if s.want == nil {
			noEvent(t, w)
			continue
		}
		if got := nextWithin(t, w); got != *s.want {
			t.Errorf("%s: got %v, want %v", s.name, got, *s.want)
		}
	}
}

func TestHealthInjectUnknownTarget(t *testing.T) {
	n := fakehal.MustNew(fakehal.Options{})
	tests := []struct {
		name string
		err  error
	}{
		{name: "gpu out of range", err: n.InjectXid(3, "", 79)},
		{name: "unknown mig device", err: n.InjectXid(0, "MIG-nope", 79)},
		{name: "ecc on unknown gpu", err: n.InjectECC(-1, "")},
		{name: "recover unknown gpu", err: n.Recover(9)},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, realize.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrNotFound", tt.name, tt.err)
		}
	}
}

func TestHealthWatchesAreIndependent(t *testing.T) {
	n := fakehal.MustNew(fakehal.Options{})
	if err := n.InjectXid(0, "", 79); err != nil { // before any watch: unseen
		t.Fatal(err)
	}
	a, _ := n.WatchHealth(context.Background(), realize.HealthChecks{})
	defer a.Close()
	noEvent(t, a)
	b, _ := n.WatchHealth(context.Background(), realize.HealthChecks{})
	defer b.Close()
	if err := n.InjectXid(0, "", 79); err != nil {
		t.Fatal(err)
	}
	for _, w := range []realize.HealthWatch{a, b} {
		if got := nextWithin(t, w); got.Healthy || got.GPU != 0 {
			t.Errorf("got %v, want GPU 0 unhealthy", got)
		}
	}
}

func TestHealthCloseUnblocksNext(t *testing.T) {
	defer goleak.VerifyNone(t)
	n := fakehal.MustNew(fakehal.Options{})
	w, _ := n.WatchHealth(context.Background(), realize.HealthChecks{})
	done := make(chan error)
	go func() {
		_, err := w.Next(context.Background())
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let Next block; the result is the same if it has not
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, realize.ErrWatchClosed) {
		t.Errorf("Next after Close = %v, want ErrWatchClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if err := n.InjectXid(0, "", 79); err != nil { // a closed watch receives nothing
		t.Fatal(err)
	}
	if _, err := w.Next(context.Background()); !errors.Is(err, realize.ErrWatchClosed) {
		t.Errorf("Next on closed watch = %v, want ErrWatchClosed", err)
	}
}

func TestHealthDoneContextRefused(t *testing.T) {
	n := fakehal.MustNew(fakehal.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.WatchHealth(ctx, realize.HealthChecks{}); !errors.Is(err, context.Canceled) {
		t.Errorf("WatchHealth(done ctx) = %v, want context.Canceled", err)
	}
}

func ExampleNode_InjectXid() {
	ctx := context.Background()
	n := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
	w, _ := n.WatchHealth(ctx, realize.HealthChecks{})
	defer w.Close()

	_ = n.InjectXid(0, "", 31) // GPU memory page fault: the application's fault, ignored
	_ = n.InjectXid(1, "", 79) // fallen off the bus
	e, _ := w.Next(ctx)
	fmt.Println(e)
	_ = n.Recover(1)
	e, _ = w.Next(ctx)
	fmt.Println(e)
	// Output:
	// GPU 1 unhealthy (xid 79)
	// GPU 1 healthy (recovered)
}
