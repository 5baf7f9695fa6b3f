package nvmlhal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/nvmlhal"
	"github.com/dynmig/dynmig/nvmlhal/nvmlmock"
	"github.com/dynmig/dynmig/realize"
)

const testPoll = 5 * time.Millisecond

func openWatch(t *testing.T, b *nvmlhal.Backend, srv *nvmlmock.Server, opts nvmlhal.HealthOptions) *nvmlhal.HealthWatch {
	t.Helper()
	if opts.Poll == 0 {
		opts.Poll = testPoll
	}
	w, err := b.WatchHealthWith(context.Background(), opts)
	if err != nil {
		t.Fatalf("WatchHealthWith: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if got := srv.EventSets(); got != 0 {
			t.Errorf("event sets left after Close = %d, want 0", got)
		}
	})
	return w
}

// next waits for the next transition, failing shortly before the binary's timeout.
func next(t *testing.T, w realize.HealthWatch) realize.HealthEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound())
	defer cancel()
	e, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return e
}

// quiet checks that no transition arrives within a few polls.
func quiet(t *testing.T, w realize.HealthWatch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*testPoll)
	defer cancel()
	if e, err := w.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next = %v, %v; want no transition", e, err)
	}
}

func wholeGPU(gpu int, healthy bool, cause realize.HealthCause, xid uint64) realize.HealthEvent {
	return realize.HealthEvent{GPU: gpu, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: healthy, Cause: cause, Xid: xid}
}

func TestHealthEventsOnStrictMock(t *testing.T) {
	b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	inst := mustCreate(t, b, 2, p1g, at(0, 1))
	ci := inst.ComputeInstances[0]
	w := openWatch(t, b, srv, nvmlhal.HealthOptions{Checks: realize.HealthChecks{Disable: []uint64{63}}})

	steps := []struct {
		name   string
		inject func() error
		want   *realize.HealthEvent // nil: no transition
	}{
		{name: "application xid 43 ignored", inject: func() error { return srv.InjectXid(1, 43) }},
		{name: "xid from options ignored", inject: func() error { return srv.InjectXid(1, 63) }},
		{name: "single-bit ecc is corrected", inject: func() error {
			return srv.InjectEvent(1, nvml.EventTypeSingleBitEccError, 0, realize.NoInstance, realize.NoInstance)
		}},
		{name: "pstate change not registered", inject: func() error {
			return srv.InjectEvent(1, nvml.EventTypePState, 0, realize.NoInstance, realize.NoInstance)
		}},
		{name: "critical xid on gpu 1", inject: func() error { return srv.InjectXid(1, 79) }, want: ptr(wholeGPU(1, false, realize.CauseXid, 79))},
		{name: "again on gpu 1: no transition", inject: func() error { return srv.InjectXid(1, 48) }},
		{name: "xid on a mig device marks it", inject: func() error { return srv.InjectMIGXid(2, inst.GIID, ci.ID, 94) },
			want: &realize.HealthEvent{GPU: 2, GI: inst.GIID, CI: ci.ID, Cause: realize.CauseXid, Xid: 94}},
		{name: "double-bit ecc", inject: func() error {
			return srv.InjectEvent(3, nvml.EventTypeDoubleBitEccError, 0, realize.NoInstance, realize.NoInstance)
		}, want: ptr(wholeGPU(3, false, realize.CauseDoubleBitECC, 0))},
		{name: "recovery action none heals gpu 1", inject: func() error {
			return srv.InjectEvent(1, nvml.EventTypeGpuRecoveryAction, uint64(nvml.GPU_RECOVERY_ACTION_NONE), realize.NoInstance, realize.NoInstance)
		}, want: ptr(wholeGPU(1, true, realize.CauseRecovered, 0))},
		{name: "recovery action reset means unusable", inject: func() error {
			return srv.InjectEvent(4, nvml.EventTypeGpuRecoveryAction, uint64(nvml.GPU_RECOVERY_ACTION_GPU_RESET), realize.NoInstance, realize.NoInstance)
		}, want: ptr(wholeGPU(4, false, realize.CauseUnavailable, 0))},
		{name: "gpu unavailable", inject: func() error {
			return srv.InjectEvent(5, nvml.EventTypeGpuUnavailableError, 0, realize.NoInstance, realize.NoInstance)
		}, want: ptr(wholeGPU(5, false, realize.CauseUnavailable, 0))},
		{name: "recovering gpu 2 heals its mig device", inject: func() error {
			return srv.InjectEvent(2, nvml.EventTypeGpuRecoveryAction, uint64(nvml.GPU_RECOVERY_ACTION_NONE), realize.NoInstance, realize.NoInstance)
		}, want: ptr(wholeGPU(2, true, realize.CauseRecovered, 0))},
	}
	for _, s := range steps {
		if err := s.inject(); err != nil {
			t.Fatalf("%s: inject: %v", s.name, err)
		}
		if s.want == nil {
			quiet(t, w)
			continue
		}
		if got := next(t, w); got != *s.want {
			t.Errorf("%s: got %v, want %v", s.name, got, *s.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestHealthRegistration(t *testing.T) {
	b, srv := newBackend(t, nvmlmock.DGXH100, nvmlmock.Options{})
	srv.SetSupportedEvents(0, 0)                              // an old GPU: nothing to watch, stays healthy
	srv.SetSupportedEvents(1, nvml.EventTypeXidCriticalError) // Xids only: registered for what it has
	srv.FailNext(nvmlmock.OpRegisterEvents, nvml.ERROR_UNKNOWN)
	w := openWatch(t, b, srv, nvmlhal.HealthOptions{})
	// The first registration (GPU 1's, as GPU 0 registers nothing) failed.
	if got, want := next(t, w), wholeGPU(1, false, realize.CauseRegistration, 0); got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	if err := srv.InjectXid(0, 79); err != nil {
		t.Fatal(err)
	}
	quiet(t, w)
	if err := srv.InjectXid(2, 79); err != nil {
		t.Fatal(err)
	}
	if got, want := next(t, w), wholeGPU(2, false, realize.CauseXid, 79); got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestHealthWaitFailureMarksEveryGPU(t *testing.T) {
	b, srv := newBackend(t, nvmlmock.DGXB200, nvmlmock.Options{})
	w := openWatch(t, b, srv, nvmlhal.HealthOptions{})
	srv.FailNext(nvmlmock.OpEventSetWait, nvml.ERROR_GPU_IS_LOST)
	_, err := w.Next(context.Background())
	var hw *realize.HardwareError
	if !errors.As(err, &hw) || !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Fatalf("Next = %v, want a HardwareError for GPU_IS_LOST", err)
	}
	for gpu := range 8 {
		if got, want := next(t, w), wholeGPU(gpu, false, realize.CauseWatchFailed, 0); got != want {
			t.Errorf("got %v, want %v", got, want)
		}
	}
	// The watch keeps working after the failure.
	if err := srv.InjectEvent(3, nvml.EventTypeGpuRecoveryAction, uint64(nvml.GPU_RECOVERY_ACTION_NONE), realize.NoInstance, realize.NoInstance); err != nil {
		t.Fatal(err)
	}
	if got, want := next(t, w), wholeGPU(3, true, realize.CauseRecovered, 0); got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestHealthCloseAndContext(t *testing.T) {
	defer goleak.VerifyNone(t)
	b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	w := openWatch(t, b, srv, nvmlhal.HealthOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Next(done ctx) = %v, want context.Canceled", err)
	}
	done := make(chan error)
	go func() {
		_, err := w.Next(context.Background())
		done <- err
	}()
	time.Sleep(2 * testPoll) // let Next wait in NVML; the outcome is the same if it has not
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, realize.ErrWatchClosed) {
		t.Errorf("Next across Close = %v, want ErrWatchClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestHealthWatchNeedsInit(t *testing.T) {
	srv := nvmlmock.New(nvmlmock.DGXA100, nvmlmock.Options{})
	b := nvmlhal.New(nvmlhal.Options{NVML: srv})
	_, err := b.WatchHealth(context.Background(), realize.HealthChecks{})
	if !errors.Is(err, nvml.ERROR_UNINITIALIZED) {
		t.Errorf("WatchHealth before Init = %v, want ERROR_UNINITIALIZED", err)
	}
	if got := srv.EventSets(); got != 0 {
		t.Errorf("event sets after a failed watch = %d, want 0", got)
	}
}

func ExampleBackend_WatchHealth() {
	ctx := context.Background()
	srv := nvmlmock.New(nvmlmock.DGXH200, nvmlmock.Options{})
	b := nvmlhal.New(nvmlhal.Options{NVML: srv})
	if err := b.Init(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer b.Shutdown(ctx)
	w, err := b.WatchHealthWith(ctx, nvmlhal.HealthOptions{Poll: 10 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()

	_ = srv.InjectXid(6, 13) // graphics engine exception: the application's fault
	_ = srv.InjectXid(6, 79) // fallen off the bus
	e, _ := w.Next(ctx)
	fmt.Println(e)
	// Output:
	// GPU 6 unhealthy (xid 79)
}

// A backend that makes its own library refuses a watch before Init
// instead of calling into a library that is not loaded.
func TestHealthWatchOwnedLibraryNeedsInit(t *testing.T) {
	b := nvmlhal.New(nvmlhal.Options{})
	_, err := b.WatchHealth(context.Background(), realize.HealthChecks{})
	if !errors.Is(err, nvml.ERROR_UNINITIALIZED) {
		t.Fatalf("WatchHealth on an owned, uninitialised library = %v, want ERROR_UNINITIALIZED", err)
	}
}

// RegisterEvents outcomes: NOT_SUPPORTED (an old or virtualised GPU)
// leaves the GPU healthy, as NVIDIA's device plugin and HAMi do; any other
// failure reports it unhealthy, since its failures would go unseen.
func TestHealthRegisterEventsOutcomes(t *testing.T) {
	tests := []struct {
		name string
		ret  nvml.Return // GPU 0's RegisterEvents; SUCCESS: no failure injected
		want *realize.HealthEvent
	}{
		{name: "registered", ret: nvml.SUCCESS},
		{name: "not supported stays healthy", ret: nvml.ERROR_NOT_SUPPORTED},
		{name: "unknown error is unhealthy", ret: nvml.ERROR_UNKNOWN, want: ptr(wholeGPU(0, false, realize.CauseRegistration, 0))},
		{name: "gpu lost is unhealthy", ret: nvml.ERROR_GPU_IS_LOST, want: ptr(wholeGPU(0, false, realize.CauseRegistration, 0))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
			if tt.ret != nvml.SUCCESS {
				srv.FailNext(nvmlmock.OpRegisterEvents, tt.ret)
			}
			w := openWatch(t, b, srv, nvmlhal.HealthOptions{})
			if tt.want != nil {
				if got := next(t, w); got != *tt.want {
					t.Fatalf("got %v, want %v", got, *tt.want)
				}
			} else {
				quiet(t, w)
			}
			// The other GPUs are watched either way.
			if err := srv.InjectXid(1, 79); err != nil {
				t.Fatal(err)
			}
			if got, want := next(t, w), wholeGPU(1, false, realize.CauseXid, 79); got != want {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// HealthOptions.Checks carry DP_DISABLE_HEALTHCHECKS and
// DP_ENABLE_HEALTHCHECKS: an enabled application Xid counts, a disabled
// critical one does not, and ECC errors count whatever the Xid lists say.
func TestHealthChecksOnStrictMock(t *testing.T) {
	checks, err := realize.ParseHealthChecks("all", "43")
	if err != nil {
		t.Fatal(err)
	}
	b, srv := newBackend(t, nvmlmock.DGXA100, nvmlmock.Options{})
	w := openWatch(t, b, srv, nvmlhal.HealthOptions{Checks: checks})
	if err := srv.InjectXid(0, 79); err != nil {
		t.Fatal(err)
	}
	quiet(t, w)
	if err := srv.InjectXid(0, 43); err != nil {
		t.Fatal(err)
	}
	if got, want := next(t, w), wholeGPU(0, false, realize.CauseXid, 43); got != want {
		t.Errorf("got %v, want %v", got, want)
	}
	if err := srv.InjectEvent(1, nvml.EventTypeDoubleBitEccError, 0, realize.NoInstance, realize.NoInstance); err != nil {
		t.Fatal(err)
	}
	if got, want := next(t, w), wholeGPU(1, false, realize.CauseDoubleBitECC, 0); got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}
