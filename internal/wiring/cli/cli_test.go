package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"k8s.io/klog/v2"

	"github.com/dynmig/dynmig/internal/wiring/cli"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func parse(t *testing.T, args ...string) *cli.Flags {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := cli.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		level slog.Level
		json  bool
		bad   bool
	}{
		{nil, slog.LevelInfo, false, false},
		{[]string{"-log-format=json"}, slog.LevelInfo, true, false},
		{[]string{"-log-level=warn"}, slog.LevelWarn, false, false},
		{[]string{"-v=2"}, slog.Level(-2), false, false},
		{[]string{"-v=2", "-log-level=debug"}, slog.LevelDebug, false, false},
		{[]string{"-log-format=xml"}, 0, false, true},
		{[]string{"-v=-1"}, 0, false, true},
	} {
		f := parse(t, tc.args...)
		var buf bytes.Buffer
		log, err := f.Logger(&buf, "test")
		if tc.bad {
			if !errors.Is(err, cli.ErrFlag) {
				t.Errorf("%v: err %v, want ErrFlag", tc.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := f.EffectiveLevel(); got != tc.level {
			t.Errorf("%v: level %v, want %v", tc.args, got, tc.level)
		}
		log.Error("x")
		if got := json.Valid(buf.Bytes()); got != tc.json {
			t.Errorf("%v: JSON output %v, want %v: %s", tc.args, got, tc.json, buf.String())
		}
	}
	klog.ClearLogger()
}

func TestKlogRouted(t *testing.T) {
	f := parse(t, "-log-format=json", "-v=3")
	var buf bytes.Buffer
	if _, err := f.Logger(&buf, "test"); err != nil {
		t.Fatal(err)
	}
	defer klog.ClearLogger()
	klog.InfoS("from client-go", "key", "value")
	klog.V(3).InfoS("verbose")
	klog.V(4).InfoS("too verbose")
	klog.Flush()
	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("klog record is not this logger's JSON: %q", line)
		}
		if rec["component"] != "test" {
			t.Errorf("record without the component attribute: %q", line)
		}
		msgs = append(msgs, rec["msg"].(string))
	}
	if strings.Join(msgs, ",") != "from client-go,verbose" {
		t.Errorf("klog records %q, want the info one and the V(3) one", msgs)
	}
}

func TestVersion(t *testing.T) {
	b := cli.BuildVersion()
	if b.Module == "" || b.Version == "" || b.GoVersion == "" {
		t.Errorf("incomplete build: %+v", b)
	}
	var buf bytes.Buffer
	if err := cli.PrintVersion(&buf, "tool"); err != nil || !strings.HasPrefix(buf.String(), "tool "+b.Module+" ") {
		t.Errorf("PrintVersion: %q, %v", buf.String(), err)
	}
	if s := (cli.Build{Module: "m", Version: "v1", Revision: "abc", Modified: true, GoVersion: "go"}).String(); s != "m v1 (revision abc, modified) go" {
		t.Errorf("String: %q", s)
	}
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestOpsHandler(t *testing.T) {
	ready := errors.New("informers not synced")
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_total", Help: "h"})
	reg, err := cli.NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	h := cli.Ops{Ready: func() error { return ready }, Registry: reg}.Handler()
	if code, _ := get(t, h, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, ready.Error()) {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	ready = nil
	if code, _ := get(t, h, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz when ready: %d", code)
	}
	code, body := get(t, h, "/metrics")
	for _, want := range []string{"test_total 0", "go_goroutines", "process_start_time_seconds"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics %d lacks %q", code, want)
		}
	}
	if code, _ := get(t, cli.Ops{}.Handler(), "/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics without a registry: %d", code)
	}
}

func TestServeOps(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, stop, err := cli.ServeOps(ctx, "127.0.0.1:0", cli.Ops{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	stop()
	if _, _, err := cli.ServeOps(context.Background(), "127.0.0.1:-1", cli.Ops{}); err == nil {
		t.Error("bad address: no error")
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		stop bool
	}{
		{name: "flags", args: []string{"-v", "2"}, code: cli.ExitOK},
		{name: "help", args: []string{"-h"}, code: cli.ExitOK, stop: true},
		{name: "unknown flag", args: []string{"-colour"}, code: cli.ExitUsage, stop: true},
		{name: "bad value", args: []string{"-v", "two"}, code: cli.ExitUsage, stop: true},
		{name: "argument", args: []string{"now"}, code: cli.ExitUsage, stop: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ExitOnError)
			cli.Register(fs)
			code, stop := cli.Parse(fs, tt.args, io.Discard)
			if code != tt.code || stop != tt.stop {
				t.Errorf("Parse(%q) = %d, %v; want %d, %v", tt.args, code, stop, tt.code, tt.stop)
			}
		})
	}
}

func TestStart(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stop   bool
		stdout string
		check  func() error
	}{
		{name: "runs", args: []string{"-log-format", "json"}, code: cli.ExitOK},
		{name: "version", args: []string{"-version"}, code: cli.ExitOK, stop: true, stdout: "x "},
		{name: "bad log format", args: []string{"-log-format", "xml"}, code: cli.ExitUsage, stop: true},
		{name: "bad flag", args: []string{"-nope"}, code: cli.ExitUsage, stop: true},
		{name: "refused by the binary's check", args: []string{"-v", "1"}, code: cli.ExitUsage, stop: true,
			check: func() error { return cli.Required("node", "", "a name") }},
		{name: "passed the binary's check", args: []string{"-v", "1"}, code: cli.ExitOK,
			check: func() error { return cli.Required("node", "n1", "a name") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ExitOnError)
			f := cli.Register(fs)
			var out bytes.Buffer
			log, code, stop := f.Start(fs, "x", tt.args, &out, io.Discard, tt.check)
			if code != tt.code || stop != tt.stop || (log == nil) != stop || !strings.HasPrefix(out.String(), tt.stdout) {
				t.Errorf("Start(%q) = %v, %d, %v, stdout %q", tt.args, log, code, stop, out.String())
			}
		})
	}
}

func TestStartOps(t *testing.T) {
	var addr net.Addr
	stop, err := cli.StartOps("127.0.0.1:0", cli.Ops{}, func(a net.Addr) { addr = a })
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	stop()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz %d", resp.StatusCode)
	}
	none, err := cli.StartOps("", cli.Ops{}, func(net.Addr) { t.Error("an empty address serves nothing") })
	if err != nil {
		t.Fatal(err)
	}
	none()
	if _, err := cli.StartOps("127.0.0.1:-1", cli.Ops{}, nil); err == nil {
		t.Error("bad address: no error")
	}
}
