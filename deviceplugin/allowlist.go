package deviceplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
)

// ErrNotRunning: [Plugin.SetAllowlist] was called before the plugin was
// ready ([Plugin.Ready]).
var ErrNotRunning = errors.New("deviceplugin: not running")

// SetAllowlist changes the profile policy: it validates a, discovers the
// GPUs again with it, publishes the new node registration and re-sends the
// device list to the kubelet. An invalid a (matching capability.ErrConfig)
// changes nothing. Reservations on profiles a no longer allows keep their
// instances and slots: the scheduler reports them as conflicts, and they
// are reclaimed only when their pods end. It works once the plugin is
// ready ([ErrNotRunning] before); calls must not overlap.
func (p *Plugin) SetAllowlist(ctx context.Context, a capability.Allowlist) error {
	if err := a.Validate(); err != nil {
		return err
	}
	select {
	case <-p.ready: // Run discovered and published; it writes neither again
	default:
		return ErrNotRunning
	}
	gpus, report, err := capability.Discover(ctx, p.cfg.Hardware, a)
	if err != nil {
		return fmt.Errorf("deviceplugin: discovery: %w", err)
	}
	for _, f := range report.Findings {
		p.log.Info("discovery finding", "finding", f.String())
	}
	p.mu.Lock()
	p.cfg.Allowlist = a.Clone()
	p.gpus = gpus
	p.mu.Unlock()
	p.health.wake()
	return p.publish(ctx)
}

// rediscover reads the GPUs again under the current allowlist, publishes
// the node registration and re-sends the device list: after a maintenance
// pass switched MIG mode on for a GPU (Config.Manager.EnableMIG), whose
// profiles exist only from then on.
func (p *Plugin) rediscover(ctx context.Context) error {
	p.mu.Lock()
	a := p.cfg.Allowlist
	p.mu.Unlock()
	gpus, report, err := capability.Discover(ctx, p.cfg.Hardware, a)
	if err != nil {
		return fmt.Errorf("deviceplugin: discovery: %w", err)
	}
	for _, f := range report.Findings {
		p.log.Info("discovery finding", "finding", f.String())
	}
	p.mu.Lock()
	p.gpus = gpus
	p.mu.Unlock()
	p.health.wake()
	return p.publish(ctx)
}

// wake wakes every ListAndWatch stream, so that it sends the device list
// again (its size follows the GPUs' profiles).
func (h *healthTracker) wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}
