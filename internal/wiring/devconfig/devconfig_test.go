package devconfig_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/testwait"
	"github.com/dynmig/dynmig/internal/wiring/devconfig"
	"github.com/dynmig/dynmig/realize"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	good      = "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [1g.5gb, 3g.20gb]\n"
	alias     = "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [1g.5gb, 7g.41gb]\n"
	unknown   = "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [5g.99gb]\n"
	malformed = "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [big]\n"
	typo      = "nvidia:\n  migProfileAllowList: []\n"
	notYAML   = "nvidia: [\n"
	noKey     = "nvidia:\n  deviceSplitCount: 10\n"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReadAndCheck(t *testing.T) {
	hw := fakehal.MustNew(fakehal.Options{})
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		entries       int  // -1: the default
		parseErr      bool // refused by Read, matching capability.ErrConfig
		checkErr      bool // refused by Check on an A100 node
	}{
		{"good", good, 1, false, false},
		{"alias next to a known name", alias, 1, false, false},
		{"unknown profile", unknown, 1, false, true},
		{"malformed profile", malformed, 0, true, false},
		{"misspelt key", typo, 0, true, false},
		{"not YAML", notYAML, 0, true, false},
		{"no allowlist key", noKey, -1, false, false},
	} {
		path := filepath.Join(dir, tc.name)
		write(t, path, tc.content)
		a, data, err := devconfig.Read(path)
		if tc.parseErr {
			var e *devconfig.Error
			if !errors.Is(err, devconfig.ErrRefused) || !errors.Is(err, capability.ErrConfig) || !errors.As(err, &e) || e.Path != path {
				t.Errorf("%s: Read error %v, want a refusal naming the file", tc.name, err)
			}
			continue
		}
		if err != nil || string(data) != tc.content {
			t.Fatalf("%s: Read: %v", tc.name, err)
		}
		if want := tc.entries; want >= 0 && len(a) != want || want < 0 && len(a) != len(capability.DefaultAllowlist()) {
			t.Errorf("%s: %d entries, want %d", tc.name, len(a), want)
		}
		_, err = devconfig.Check(context.Background(), path, hw, a)
		var e *devconfig.Error
		if got := errors.Is(err, devconfig.ErrNoProfiles) && errors.As(err, &e) && len(e.Findings) > 0; got != tc.checkErr {
			t.Errorf("%s: Check error %v, want refusal %v", tc.name, err, tc.checkErr)
		}
	}
	if a, data, err := devconfig.Read(""); err != nil || data != nil || len(a) != len(capability.DefaultAllowlist()) {
		t.Errorf(`Read(""): %v, %q, %v; want the default`, a, data, err)
	}
	if _, _, err := devconfig.Read(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) || !errors.Is(err, devconfig.ErrRefused) {
		t.Errorf("missing file: %v", err)
	}
}

// syncBuffer is a log sink the test reads while Watch writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Count(b.buf.Bytes(), []byte("\n"))
}

// TestWatch: a changed file is applied at the next tick, a refused one
// (by parsing or by Apply) is logged and not applied, unchanged content
// is not applied again, and a trigger applies the content again.
func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write(t, path, good)
	_, applied, err := devconfig.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	got := make(chan capability.Allowlist, 1)
	trigger := make(chan os.Signal)
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- devconfig.Watch(ctx, devconfig.WatchOptions{
			Path: path, Applied: applied, Trigger: trigger, Interval: time.Second, Clock: clk,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Apply: func(_ context.Context, a capability.Allowlist) error {
				if a[0].Profiles[0] == "7g.40gb" {
					return errors.New("refused by the component")
				}
				got <- a
				return nil
			},
		})
	}()
	bound := time.After(testwait.Bound())
	reads := 0 // log records so far: Watch logs one per read
	// read waits for Watch's next record and returns the allowlist it
	// applied, or nil.
	read := func() capability.Allowlist {
		t.Helper()
		reads++
		for logs.lines() < reads {
			select {
			case <-bound:
				t.Fatal("hung")
			default:
				time.Sleep(time.Millisecond)
			}
		}
		select {
		case a := <-got:
			return a
		default:
			return nil
		}
	}
	// tick steps the clock once Watch waits on its ticker, and returns
	// what that read applied.
	tick := func() capability.Allowlist {
		t.Helper()
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Second)
		return read()
	}
	if a := tick(); a != nil {
		t.Errorf("unchanged content applied: %v", a)
	}
	write(t, path, alias)
	if a := tick(); len(a) != 1 || a[0].Profiles[1] != "7g.41gb" {
		t.Errorf("changed content: applied %v", a)
	}
	write(t, path, malformed)
	if a := tick(); a != nil {
		t.Errorf("malformed content applied: %v", a)
	}
	write(t, path, "nvidia:\n  migProfileAllowlist:\n  - models: [A100]\n    profiles: [7g.40gb]\n")
	if a := tick(); a != nil {
		t.Errorf("content the component refused applied: %v", a)
	}
	write(t, path, good)
	trigger <- os.Interrupt
	if a := read(); len(a) != 1 || len(a[0].Profiles) != 2 {
		t.Errorf("triggered: applied %v", a)
	}
	trigger <- os.Interrupt
	if a := read(); len(a) != 1 {
		t.Errorf("triggered again, same content: applied %v", a)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Watch returned %v", err)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if n := bytes.Count(logs.buf.Bytes(), []byte("device config refused; the last good config stays in force")); n != 2 {
		t.Errorf("%d refusals logged, want 2:\n%s", n, logs.buf.String())
	}
}

// Open reads, opens and checks, closing the hardware when the config is
// refused; the default config is never refused.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		refused       bool
	}{
		{"default", "", false},
		{"good", good, false},
		{"unknown profile", unknown, true},
		{"malformed", malformed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.content != "" {
				path = filepath.Join(dir, tc.name)
				write(t, path, tc.content)
			}
			opens, closes := 0, 0
			open := func(context.Context) (realize.Realizer, func(), error) {
				opens++
				return fakehal.MustNew(fakehal.Options{}), func() { closes++ }, nil
			}
			o, err := devconfig.Open(t.Context(), path, open)
			if (err != nil) != tc.refused {
				t.Fatalf("Open: %v, want refused %v", err, tc.refused)
			}
			if tc.refused {
				if !errors.Is(err, devconfig.ErrRefused) && !errors.Is(err, capability.ErrConfig) {
					t.Errorf("Open: %v, want a refusal", err)
				}
				if opens != closes {
					t.Errorf("opened %d, closed %d: a refused config leaves the hardware closed", opens, closes)
				}
				return
			}
			if o.Hardware == nil || len(o.Allowlist) == 0 {
				t.Errorf("Open = %+v, want the hardware and an allowlist", o)
			}
			o.Close()
			if closes != 1 {
				t.Errorf("closed %d times, want 1", closes)
			}
		})
	}
	failing := func(context.Context) (realize.Realizer, func(), error) { return nil, nil, errors.New("no GPU") }
	if _, err := devconfig.Open(t.Context(), "", failing); err == nil {
		t.Error("Open with a failing backend: no error")
	}
}
