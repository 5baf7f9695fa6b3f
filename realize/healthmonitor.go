package realize

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// forever is how long a monitor with its checks off waits: until ctx or
// Close ends it.
const forever = time.Duration(1<<63 - 1)

// Default backoff of a [HealthMonitor] between attempts to open a watch.
const (
	DefaultWatchRetryMin = time.Second
	DefaultWatchRetryMax = 5 * time.Minute
)

// HealthMonitorOptions configures a [HealthMonitor]. The zero value
// retries from [DefaultWatchRetryMin] up to [DefaultWatchRetryMax] and
// discards logs.
type HealthMonitorOptions struct {
	// Checks are passed to every WatchHealth. When they are
	// [HealthChecks.Off], no watch is opened: Next waits for ctx or Close
	// and every GPU keeps the health it has.
	Checks HealthChecks
	// RetryMin is the first wait after a watch could not be opened; each
	// further failure doubles it, up to RetryMax.
	RetryMin, RetryMax time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
}

// HealthMonitor is a [HealthWatch] that keeps a backend's watch open: it
// opens the watch on the first Next and, when that fails (NVML could not
// create its event set, the library is not initialised), reports every
// GPU it was given unmonitored ([CauseUnmonitored]) and tries again with
// a doubling backoff until it succeeds; the GPUs are then reported
// monitored again ([CauseMonitored]) before the watch's own events. A
// watch that ends by itself ([ErrWatchClosed] without Close) is opened
// again the same way.
//
// Errors of the open watch's Next (a failed NVML wait) are returned as
// they are and the watch stays open, as [HealthWatch] says: the caller
// logs them and calls Next again. Like every HealthWatch it starts no
// goroutine; Next and Close may be called from different goroutines.
type HealthMonitor struct {
	hw     HealthWatcher
	checks HealthChecks
	gpus   []int
	min    time.Duration
	max    time.Duration
	log    *slog.Logger

	mu          sync.Mutex // serialises Next
	pending     []HealthEvent
	attempted   bool // open was called
	unmonitored bool
	failed      bool // the last open failed: wait until retryAt before the next
	retryAt     time.Time
	delay       time.Duration // the wait after the next failure

	wmu       sync.Mutex // guards w against Close
	w         HealthWatch
	closed    chan struct{}
	closeOnce sync.Once
}

var _ HealthWatch = (*HealthMonitor)(nil)

// NewHealthMonitor returns a monitor of hw's health watch over the GPUs
// with the given NVML indices (those reported unmonitored while no watch
// is open). It opens nothing until the first Next.
func NewHealthMonitor(hw HealthWatcher, gpus []int, opts HealthMonitorOptions) *HealthMonitor {
	if opts.RetryMin <= 0 {
		opts.RetryMin = DefaultWatchRetryMin
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(DefaultWatchRetryMax, opts.RetryMin)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gpus = slices.Clone(gpus)
	slices.Sort(gpus)
	return &HealthMonitor{hw: hw, checks: opts.Checks, gpus: slices.Compact(gpus), min: opts.RetryMin, max: opts.RetryMax, log: log,
		delay: opts.RetryMin, closed: make(chan struct{})}
}

// Open makes the first attempt to open the watch now rather than in the
// first Next, so that a caller that reports itself ready afterwards misses
// no event after that point. It returns the attempt's error, for the
// caller to log; either way the monitor goes on as Next describes. Open
// after the first attempt does nothing.
func (m *HealthMonitor) Open(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.attempted {
		return nil
	}
	if m.checks.Off() {
		m.attempted = true
		m.log.Warn("GPU health checks are disabled: no GPU failure will be seen", "checks", m.checks.String())
		return nil
	}
	return m.open(ctx)
}

// Next implements [HealthWatch].
func (m *HealthMonitor) Next(ctx context.Context) (HealthEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		if len(m.pending) > 0 {
			e := m.pending[0]
			m.pending = m.pending[1:]
			return e, nil
		}
		if err := m.alive(ctx); err != nil {
			return HealthEvent{}, err
		}
		w := m.watch()
		if w == nil && m.checks.Off() {
			return HealthEvent{}, m.sleep(ctx, forever)
		}
		if w == nil {
			if err := m.open(ctx); err != nil && m.alive(ctx) != nil {
				return HealthEvent{}, m.alive(ctx)
			}
			continue
		}
		e, err := w.Next(ctx)
		if errors.Is(err, ErrWatchClosed) && m.alive(ctx) == nil {
			m.log.Warn("health watch ended by itself; opening a new one")
			m.drop(w)
			continue
		}
		return e, err
	}
}

func (m *HealthMonitor) alive(ctx context.Context) error {
	select {
	case <-m.closed:
		return ErrWatchClosed
	default:
	}
	return ctx.Err()
}

func (m *HealthMonitor) watch() HealthWatch {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	return m.w
}

// drop closes w and forgets it, so that Next opens a new watch.
func (m *HealthMonitor) drop(w HealthWatch) {
	m.wmu.Lock()
	if m.w == w {
		m.w = nil
	}
	m.wmu.Unlock()
	if err := w.Close(); err != nil {
		m.log.Warn("closing an ended health watch", "err", err)
	}
}

// open makes one attempt to open the watch, after the backoff when the
// last attempt failed, and returns its error. Success or failure queues
// the events that say so.
func (m *HealthMonitor) open(ctx context.Context) error {
	if wait := time.Until(m.retryAt); m.failed && wait > 0 {
		if err := m.sleep(ctx, wait); err != nil {
			return err // the next call waits only for what is left
		}
	}
	m.attempted = true
	w, err := m.hw.WatchHealth(ctx, m.checks)
	if err != nil {
		if cerr := m.alive(ctx); cerr != nil {
			return cerr
		}
		m.failed, m.retryAt = true, time.Now().Add(m.delay)
		m.log.Error("cannot watch GPU health; the GPUs are reported unmonitored until a watch opens", "err", err, "retry", m.delay)
		m.delay = min(2*m.delay, m.max)
		if !m.unmonitored {
			m.unmonitored = true
			for _, gpu := range m.gpus {
				m.pending = append(m.pending, HealthEvent{GPU: gpu, GI: NoInstance, CI: NoInstance, Cause: CauseUnmonitored})
			}
		}
		return err
	}
	m.wmu.Lock()
	select {
	case <-m.closed: // Close ran while the watch was being opened
		m.wmu.Unlock()
		_ = w.Close()
		return ErrWatchClosed
	default:
	}
	m.w = w
	m.wmu.Unlock()
	m.failed, m.delay = false, m.min
	if m.unmonitored {
		m.unmonitored = false
		m.log.Info("GPU health is watched again")
		for _, gpu := range m.gpus {
			m.pending = append(m.pending, HealthEvent{GPU: gpu, GI: NoInstance, CI: NoInstance, Healthy: true, Cause: CauseMonitored})
		}
	}
	return nil
}

func (m *HealthMonitor) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-m.closed:
		return ErrWatchClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close implements [HealthWatch]: it closes the open watch, if any, which
// makes a Next in progress return [ErrWatchClosed]. Its error is the
// watch's Close error.
func (m *HealthMonitor) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.closed)
		m.wmu.Lock()
		w := m.w
		m.w = nil
		m.wmu.Unlock()
		if w != nil {
			err = w.Close()
		}
	})
	return err
}
