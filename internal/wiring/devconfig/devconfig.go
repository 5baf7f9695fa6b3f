package devconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
)

// ErrRefused: a device config was not applied; see the package
// documentation.
var ErrRefused = errors.New("devconfig: device config refused")

// Error says which config was refused and why. It matches [ErrRefused] and
// wraps the cause (a capability config error matching
// capability.ErrConfig, a file error, or the component's own refusal).
type Error struct {
	// Path is the config file; "" for the built-in default.
	Path string
	// Findings are the discovery findings behind a [Check] refusal.
	Findings []capability.Finding
	Err      error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "devconfig: device config %q refused", e.Path)
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	for _, f := range e.Findings {
		b.WriteString("; " + f.String())
	}
	return b.String()
}

// Unwrap returns [ErrRefused] and the cause.
func (e *Error) Unwrap() []error { return []error{ErrRefused, e.Err} }

// ErrNoProfiles is the cause of a [Check] refusal.
var ErrNoProfiles = errors.New("an allowlist entry matching a GPU of this node names no profile the GPU has (unknown profile names?)")

// Parse reads the allowlist of the config data read from path (used only
// in errors).
func Parse(path string, data []byte) (capability.Allowlist, error) {
	cfg, err := capability.ParseDeviceConfig(data)
	if err != nil {
		return nil, &Error{Path: path, Err: err}
	}
	if cfg.Allowlist == nil {
		return capability.DefaultAllowlist(), nil
	}
	return cfg.Allowlist, nil
}

// Read reads and parses the config file at path, returning its allowlist
// and the content it was read from; "" gives the default and no content.
func Read(path string) (capability.Allowlist, []byte, error) {
	if path == "" {
		return capability.DefaultAllowlist(), nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, &Error{Path: path, Err: err}
	}
	a, err := Parse(path, data)
	return a, data, err
}

// Check discovers hw with allowlist a and refuses it when an entry that
// matches one of the node's MIG GPUs resolves none of its profiles there.
// It returns the discovery report for the caller to log.
func Check(ctx context.Context, path string, hw capability.HardwareView, a capability.Allowlist) (capability.DiscoveryReport, error) {
	_, report, err := capability.Discover(ctx, hw, a)
	if err != nil {
		return report, fmt.Errorf("devconfig: discovery: %w", err)
	}
	if bad := report.Of(capability.FindingNoProfiles); len(bad) > 0 {
		return report, &Error{Path: path, Findings: bad, Err: ErrNoProfiles}
	}
	return report, nil
}

// Opened is what [Open] read and opened.
type Opened struct {
	Allowlist capability.Allowlist
	Content   []byte // the file's content, for [WatchOptions.Applied]
	Hardware  realize.Realizer
	Close     func() // closes Hardware
}

// Open reads the device config at path ([Read]), opens the hardware with
// open and checks a config file against it ([Check]); the built-in
// default (path "") is not refused, its findings are logged at discovery.
// On success the caller closes the hardware with [Opened.Close].
func Open(ctx context.Context, path string, open func(context.Context) (realize.Realizer, func(), error)) (Opened, error) {
	allow, content, err := Read(path)
	if err != nil {
		return Opened{}, err
	}
	hw, closeHW, err := open(ctx)
	if err != nil {
		return Opened{}, fmt.Errorf("open backend: %w", err)
	}
	if path != "" {
		if _, err := Check(ctx, path, hw, allow); err != nil {
			closeHW()
			return Opened{}, err
		}
	}
	return Opened{Allowlist: allow, Content: content, Hardware: hw, Close: closeHW}, nil
}

// DefaultInterval is how often [Watch] reads the file by default. A
// ConfigMap volume takes up to a minute (the kubelet's sync period) to
// show a change anyway.
const DefaultInterval = 10 * time.Second

// WatchOptions configures [Watch]. Path and Apply are required.
type WatchOptions struct {
	// Path is the config file.
	Path string
	// Applied is the content already in force (from [Read] at start); a
	// read that finds the same content does nothing unless triggered.
	Applied []byte
	// Apply puts a parsed allowlist in force; an error refuses it (the
	// previous one stays) and is logged.
	Apply func(context.Context, capability.Allowlist) error
	// Trigger forces a reload (the binaries pass SIGHUP's channel).
	Trigger <-chan os.Signal
	// Interval is how often the file is read; 0 means [DefaultInterval],
	// below 0 reads only on Trigger.
	Interval time.Duration
	// Clock drives the interval; nil is the real clock.
	Clock clock.WithTicker
	// Logger; nil discards.
	Logger *slog.Logger
}

// Watch reads the file at every interval and trigger until ctx is done.
// Content that differs from the last content read (or any content, on a
// trigger) is parsed and applied; a refusal is logged as an error naming
// the file and the cause, once per content, and the last good config
// stays in force. Every read logs one record: an error for a refusal, an
// info record for an applied config, a debug record otherwise. It returns
// ctx's error.
func Watch(ctx context.Context, opts WatchOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	interval := opts.Interval
	if interval == 0 {
		interval = DefaultInterval
	}
	var tick <-chan time.Time
	if interval > 0 {
		t := clk.NewTicker(interval)
		defer t.Stop()
		tick = t.C()
	}
	seen := opts.Applied
	for {
		forced := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
		case <-opts.Trigger:
			forced = true
		}
		data, err := os.ReadFile(opts.Path)
		if err != nil {
			// A ConfigMap volume swaps its files; a failed read on a tick
			// is retried at the next one.
			level := slog.LevelDebug
			if forced {
				level = slog.LevelError
			}
			log.Log(ctx, level, "device config not read; the last good config stays in force", "file", opts.Path, "err", err)
			continue
		}
		if !forced && bytes.Equal(data, seen) {
			log.Debug("device config unchanged", "file", opts.Path)
			continue
		}
		seen = data
		a, err := Parse(opts.Path, data)
		if err == nil {
			err = opts.Apply(ctx, a)
		}
		if err != nil {
			log.Error("device config refused; the last good config stays in force", "file", opts.Path, "err", err)
			continue
		}
		log.Info("device config applied", "file", opts.Path, "entries", len(a))
	}
}
