package gpulock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/dynmig/dynmig/internal/leaf/gpulock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// result is what one Lock call returned.
type result struct {
	unlock func()
	err    error
}

// lockAsync calls s.Lock on a new goroutine and delivers its result.
func lockAsync(ctx context.Context, s *gpulock.Set, gpu int) <-chan result {
	done := make(chan result, 1)
	go func() {
		unlock, err := s.Lock(ctx, gpu)
		done <- result{unlock, err}
	}()
	return done
}

// mustLock takes gpu's lock with a background context.
func mustLock(t *testing.T, s *gpulock.Set, gpu int) func() {
	t.Helper()
	unlock, err := s.Lock(context.Background(), gpu)
	if err != nil {
		t.Fatalf("Lock(%d): got %v, want nil", gpu, err)
	}
	return unlock
}

// Inside a synctest bubble, synctest.Wait returns once every other goroutine
// is blocked, so "still waiting" is an observed fact, not a timeout.
func TestLockWaitsUntilUnlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s gpulock.Set
		unlock := mustLock(t, &s, 0)
		waiter := lockAsync(context.Background(), &s, 0)
		synctest.Wait()
		select {
		case r := <-waiter:
			t.Fatalf("second Lock of a held GPU returned (err %v) before the unlock", r.err)
		default:
		}
		unlock()
		r := <-waiter
		if r.err != nil {
			t.Fatalf("Lock after unlock: got %v, want nil", r.err)
		}
		r.unlock()
	})
}

func TestLockWaitHonoursCtx(t *testing.T) {
	tests := []struct {
		name string
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		want error
	}{
		{name: "cancel", ctx: context.WithCancel, want: context.Canceled},
		{name: "deadline", ctx: func(parent context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(parent, time.Minute)
		}, want: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var s gpulock.Set
				unlock := mustLock(t, &s, 3)
				ctx, cancel := tt.ctx(context.Background())
				defer cancel()
				waiter := lockAsync(ctx, &s, 3)
				synctest.Wait()
				if errors.Is(tt.want, context.Canceled) {
					cancel()
				} // else the bubble's clock reaches the deadline once all wait
				r := <-waiter
				if !errors.Is(r.err, tt.want) {
					t.Fatalf("Lock of a held GPU: got %v, want %v", r.err, tt.want)
				}
				if r.unlock != nil {
					t.Error("Lock that failed returned an unlock function")
				}
				// The holder still holds it: a new waiter blocks until unlock.
				next := lockAsync(context.Background(), &s, 3)
				synctest.Wait()
				select {
				case <-next:
					t.Fatal("a given-up wait released the holder's lock")
				default:
				}
				unlock()
				(<-next).unlock()
			})
		})
	}
}

// select picks at random between a free lock and a done ctx, so try often:
// a done ctx must lose every time.
func TestLockDoneCtxNeverTakesAFreeLock(t *testing.T) {
	var s gpulock.Set
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		unlock, err := s.Lock(ctx, 0)
		if !errors.Is(err, context.Canceled) || unlock != nil {
			t.Fatalf("try %d: Lock with a done ctx: got (%v, unlock %t), want (%v, no unlock)",
				i, err, unlock != nil, context.Canceled)
		}
	}
	mustLock(t, &s, 0)() // nothing was left held
}

func TestLocksOfDifferentGPUsAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s gpulock.Set
		held := mustLock(t, &s, 0)
		defer held()
		for _, gpu := range []int{1, 7, -1} {
			// Would deadlock the bubble, failing the test, if gpu 0's lock
			// covered it.
			mustLock(t, &s, gpu)()
		}
	})
}

func TestLockExcludesConcurrentHolders(t *testing.T) {
	const gpus, workers, rounds = 3, 8, 200
	var (
		s       gpulock.Set
		inside  [gpus]int // goroutines holding each GPU's lock; guarded by that lock
		entries [gpus]int
		wg      sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				gpu := (w + i) % gpus
				unlock, err := s.Lock(context.Background(), gpu)
				if err != nil {
					t.Errorf("Lock(%d): got %v, want nil", gpu, err)
					return
				}
				inside[gpu]++
				if inside[gpu] != 1 {
					t.Errorf("GPU %d held by %d goroutines at once", gpu, inside[gpu])
				}
				entries[gpu]++
				inside[gpu]--
				unlock()
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range entries {
		total += n
	}
	if got, want := total, workers*rounds; got != want {
		t.Errorf("lock entries: got %d, want %d", got, want)
	}
}

func TestLockLeavesNoGoroutine(t *testing.T) {
	var s gpulock.Set
	unlock := mustLock(t, &s, 0)
	ctx, cancel := context.WithCancel(context.Background())
	waiter := lockAsync(ctx, &s, 0)
	cancel()
	if r := <-waiter; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Lock of a held GPU after cancel: got %v, want %v", r.err, context.Canceled)
	}
	unlock()
	goleak.VerifyNone(t)
}

func ExampleSet_Lock() {
	var locks gpulock.Set
	unlock, err := locks.Lock(context.Background(), 0)
	fmt.Println("GPU 0 locked:", err == nil)

	// A caller that will not wait gives up with its context's error.
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err = locks.Lock(ctx, 0)
	fmt.Println("second caller:", err)

	unlock()
	unlock, err = locks.Lock(context.Background(), 0)
	fmt.Println("after unlock:", err == nil)
	unlock()
	// Output:
	// GPU 0 locked: true
	// second caller: context deadline exceeded
	// after unlock: true
}
