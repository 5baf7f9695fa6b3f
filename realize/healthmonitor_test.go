package realize_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

// flakyWatcher fails its first fails WatchHealth calls, recording when
// each call came, then opens fakehal watches.
type flakyWatcher struct {
	node  *fakehal.Node
	mu    sync.Mutex
	fails int
	calls []time.Time
}

var errNoEventSet = errors.New("test: event set cannot be created")

func (f *flakyWatcher) WatchHealth(ctx context.Context, checks realize.HealthChecks) (realize.HealthWatch, error) {
	f.mu.Lock()
	f.calls = append(f.calls, time.Now())
	fail := len(f.calls) <= f.fails
	f.mu.Unlock()
	if fail {
		return nil, &realize.HardwareError{Op: "EventSetCreate", GPU: -1, Cause: errNoEventSet}
	}
	return f.node.WatchHealth(ctx, checks)
}

func wholeEvent(gpu int, healthy bool, cause realize.HealthCause) realize.HealthEvent {
	return realize.HealthEvent{GPU: gpu, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: healthy, Cause: cause}
}

// A watch that cannot be opened reports every GPU unmonitored (a state
// apart from healthy and failed), retries with a doubling backoff, and
// reports the GPUs monitored again once it opens; the backend's events
// follow.
func TestHealthMonitorRetriesUnmonitored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		node := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(2, fakehal.DefaultModel)})
		hw := &flakyWatcher{node: node, fails: 4}
		m := realize.NewHealthMonitor(hw, []int{1, 0, 1}, realize.HealthMonitorOptions{RetryMin: time.Second, RetryMax: 3 * time.Second})
		defer m.Close()
		ctx := context.Background()
		var state realize.HealthState
		want := []realize.HealthEvent{
			wholeEvent(0, false, realize.CauseUnmonitored), wholeEvent(1, false, realize.CauseUnmonitored),
			wholeEvent(0, true, realize.CauseMonitored), wholeEvent(1, true, realize.CauseMonitored),
		}
		for i, w := range want {
			e, err := m.Next(ctx)
			if err != nil || e != w {
				t.Fatalf("Next #%d = %v, %v; want %v", i, e, err, w)
			}
			state.Apply(e)
			if i == 1 {
				if state.GPUHealthy(0) || !state.Unmonitored(0) {
					t.Errorf("GPU 0 healthy %v unmonitored %v while no watch is open; want false, true", state.GPUHealthy(0), state.Unmonitored(0))
				}
				if why, _ := state.Why(0); why.Cause != realize.CauseUnmonitored {
					t.Errorf("Why(0) = %v, want the unmonitored event", why)
				}
			}
		}
		if !state.GPUHealthy(0) || state.Unmonitored(1) {
			t.Errorf("after the watch opened: GPU 0 healthy %v, GPU 1 unmonitored %v", state.GPUHealthy(0), state.Unmonitored(1))
		}
		hw.mu.Lock()
		calls := hw.calls
		hw.mu.Unlock()
		var gaps []time.Duration
		for i := 1; i < len(calls); i++ {
			gaps = append(gaps, calls[i].Sub(calls[i-1]))
		}
		if wantGaps := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}; !equalDurations(gaps, wantGaps) {
			t.Errorf("retry gaps = %v, want %v", gaps, wantGaps)
		}
		// The open watch's events follow.
		if err := node.InjectXid(1, "", 79); err != nil {
			t.Fatal(err)
		}
		e, err := m.Next(ctx)
		if want := (realize.HealthEvent{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79}); err != nil || e != want {
			t.Errorf("Next = %v, %v; want %v", e, err, want)
		}
	})
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The unmonitored state is kept apart from failures: ending it leaves a
// failure recorded before, and a recovery does not end it.
func TestHealthStateUnmonitored(t *testing.T) {
	var s realize.HealthState
	xid := realize.HealthEvent{GPU: 0, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79}
	steps := []struct {
		e           realize.HealthEvent
		changed     bool
		healthy     bool
		unmonitored bool
	}{
		{e: wholeEvent(0, false, realize.CauseUnmonitored), changed: true, unmonitored: true},
		{e: wholeEvent(0, false, realize.CauseUnmonitored), unmonitored: true},
		{e: wholeEvent(0, true, realize.CauseRecovered), unmonitored: true},
		{e: xid, changed: true, unmonitored: true},
		{e: wholeEvent(0, true, realize.CauseMonitored), changed: true},
		{e: wholeEvent(0, true, realize.CauseRecovered), changed: true, healthy: true},
		{e: wholeEvent(0, true, realize.CauseMonitored), healthy: true},
	}
	for i, st := range steps {
		if got := s.Apply(st.e); got != st.changed {
			t.Errorf("step %d: Apply(%v) = %v, want %v", i, st.e, got, st.changed)
		}
		if s.GPUHealthy(0) != st.healthy || s.Unmonitored(0) != st.unmonitored {
			t.Errorf("step %d: healthy %v unmonitored %v, want %v %v", i, s.GPUHealthy(0), s.Unmonitored(0), st.healthy, st.unmonitored)
		}
	}
}

// Close ends a Next that is waiting for the next attempt, and a Next
// blocked in the open watch.
func TestHealthMonitorClose(t *testing.T) {
	tests := []struct {
		name  string
		fails int
		drain int // events to read before Next blocks
	}{
		{name: "waiting to retry", fails: 100, drain: 1},
		{name: "in the open watch", fails: 0, drain: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				node := fakehal.MustNew(fakehal.Options{})
				m := realize.NewHealthMonitor(&flakyWatcher{node: node, fails: tt.fails}, []int{0}, realize.HealthMonitorOptions{})
				for range tt.drain {
					if _, err := m.Next(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
				done := make(chan error, 1)
				go func() {
					_, err := m.Next(context.Background())
					done <- err
				}()
				synctest.Wait()
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
				if err := <-done; !errors.Is(err, realize.ErrWatchClosed) {
					t.Errorf("Next across Close = %v, want ErrWatchClosed", err)
				}
				if err := m.Close(); err != nil {
					t.Errorf("second Close = %v", err)
				}
			})
		})
	}
}

// With the checks off (DP_DISABLE_HEALTHCHECKS=all) no watch is opened and
// nothing is reported: Next waits for ctx.
func TestHealthMonitorChecksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hw := &flakyWatcher{node: fakehal.MustNew(fakehal.Options{})}
		m := realize.NewHealthMonitor(hw, []int{0}, realize.HealthMonitorOptions{Checks: realize.HealthChecks{DisableAllXids: true}})
		defer m.Close()
		if err := m.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if e, err := m.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Next = %v, %v; want to wait for ctx", e, err)
		}
		if len(hw.calls) != 0 {
			t.Errorf("WatchHealth called %d times, want 0", len(hw.calls))
		}
	})
}
