package dradriver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/testwait"
	"github.com/dynmig/dynmig/realize"
)

var errLost = errors.New("test: GPU is lost")

// lostOnce is a HealthWatcher whose watches fail their first wait (as NVML
// answers GPU_IS_LOST) and then deliver fakehal's events; calls receives
// the number of each Next call.
type lostOnce struct {
	node  *fakehal.Node
	calls chan int
}

func (l *lostOnce) WatchHealth(ctx context.Context, checks realize.HealthChecks) (realize.HealthWatch, error) {
	w, err := l.node.WatchHealth(ctx, checks)
	if err != nil {
		return nil, err
	}
	return &lostWatch{HealthWatch: w, calls: l.calls}, nil
}

type lostWatch struct {
	realize.HealthWatch
	calls chan int
	n     int
}

func (w *lostWatch) Next(ctx context.Context) (realize.HealthEvent, error) {
	w.n++
	w.calls <- w.n
	if w.n == 1 {
		return realize.HealthEvent{}, &realize.HardwareError{Op: "EventSetWait", GPU: -1, Cause: errLost}
	}
	return w.HealthWatch.Next(ctx)
}

// A failed wait does not end the driver's health watch: the events the
// backend reports next are applied (issue 25, defect 7).
func TestHealthWatchSurvivesWaitError(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	d := e.driver(t)
	hw := &lostOnce{node: e.hw, calls: make(chan int, 8)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		dradriver.WatchHealth(d, ctx, hw)
	}()
	defer func() {
		cancel()
		<-done
	}()
	await := func(want int) {
		t.Helper()
		bound, stop := context.WithTimeout(context.Background(), testwait.Bound())
		defer stop()
		for {
			select {
			case n := <-hw.calls:
				if n == want {
					return
				}
			case <-bound.Done():
				t.Fatalf("the health loop never made Next call %d", want)
			}
		}
	}
	await(2) // the wait error was logged and the loop went on
	if err := e.hw.InjectXid(1, "", 79); err != nil {
		t.Fatal(err)
	}
	await(3) // the event was applied
	for _, dev := range d.Catalog().Devices() {
		if dev.GPU == 1 {
			t.Fatalf("GPU 1 lost after a wait error still publishes %s", dev.Name)
		}
	}
}
