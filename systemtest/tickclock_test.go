package systemtest_test

import (
	"sync"
	"time"

	k8sclock "k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/kube"
)

// tickClock is the device-plugin model's fake clock. It knows when the
// plugin's maintenance runner waits for its next tick, so that the model
// steps the clock exactly then (see awaitRunner): a step made while a pass
// still runs is lost to the runner and only moves the clock, and polling
// for the moment to step costs real time.
//
// The runner's waits are the timers of at most its longest wait
// (kube.ReconcileRunnerOptions.MaxWait); the plugin's only other timer,
// the socket check, is configured far longer. Every step goes through
// Step, so that the clock knows which of the runner's timers fired.
type tickClock struct {
	*clocktesting.FakeClock
	maxWait time.Duration

	mu sync.Mutex
	// armed is the runner's timer that has neither fired nor been
	// stopped, if any.
	armed *tickTimer
	// changed is closed, and replaced, whenever the runner arms a timer.
	changed chan struct{}
}

// newTickClock returns a tickClock at now for a runner of interval.
func newTickClock(now time.Time, interval time.Duration) *tickClock {
	return &tickClock{FakeClock: clocktesting.NewFakeClock(now),
		maxWait: kube.ReconcileRunnerOptions{Interval: interval}.MaxWait(), changed: make(chan struct{})}
}

// tickTimer is one of the runner's timers.
type tickTimer struct {
	k8sclock.Timer
	c        *tickClock
	deadline time.Time
}

// NewTimer is the fake clock's, and notes a wait of the runner's.
func (c *tickClock) NewTimer(d time.Duration) k8sclock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.FakeClock.NewTimer(d)
	if d > c.maxWait {
		return t
	}
	tt := &tickTimer{Timer: t, c: c, deadline: c.FakeClock.Now().Add(d)}
	c.armed = tt
	close(c.changed)
	c.changed = make(chan struct{})
	return tt
}

// Stop stops the timer; the runner no longer waits for it.
func (t *tickTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.c.armed == t {
		t.c.armed = nil
	}
	return t.Timer.Stop()
}

// Reset is not used by the runner; a reset timer is not one it waits for.
func (t *tickTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.c.armed == t {
		t.c.armed = nil
	}
	return t.Timer.Reset(d)
}

// Step moves the clock by d and fires the timers it passes.
func (c *tickClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.FakeClock.Step(d)
	if c.armed != nil && !c.armed.deadline.After(c.FakeClock.Now()) {
		c.armed = nil
	}
}

// awaitRunner returns true once the runner waits for a timer, false if it
// did not before deadline (real time).
func (c *tickClock) awaitRunner(deadline time.Time) bool {
	for {
		c.mu.Lock()
		armed, changed := c.armed != nil, c.changed
		c.mu.Unlock()
		if armed {
			return true
		}
		wait := time.NewTimer(time.Until(deadline))
		select {
		case <-changed:
			wait.Stop()
		case <-wait.C:
			return false
		}
	}
}
