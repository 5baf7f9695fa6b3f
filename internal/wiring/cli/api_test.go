package cli_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dynmig/dynmig/internal/wiring/cli"
)

// logBuffer is a concurrency-safe log destination.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// take returns what was logged since the last take.
func (l *logBuffer) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

// TestAPIMonitor: a failing request (a 403, a 5xx, no response) is logged
// at error level with its cause when it starts, when the cause changes
// and again after a minute, not in between; its next success is logged
// and clears it; Err names what fails, wrapping ErrAPI; a request its
// caller cancelled is no failure.
func TestAPIMonitor(t *testing.T) {
	var status sync.Map // path -> int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusOK
		if v, ok := status.Load(r.URL.Path); ok {
			code = v.(int)
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	var logs logBuffer
	m := cli.NewAPIMonitor(slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Unix(0, 0)
	cli.SetNow(m, func() time.Time { return now })
	client := &http.Client{Transport: m.Wrap(http.DefaultTransport)}
	defer client.CloseIdleConnections()
	get := func(ctx context.Context, url string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	ctx := context.Background()
	pods := srv.URL + "/api/v1/pods"

	status.Store("/api/v1/pods", http.StatusForbidden)
	get(ctx, pods+"?watch=true")
	if got := logs.take(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "403 Forbidden") || !strings.Contains(got, "/api/v1/pods") {
		t.Errorf("first failure logged as %q", got)
	}
	if err := m.Err(); !errors.Is(err, cli.ErrAPI) || !strings.Contains(err.Error(), "GET "+pods+": 403 Forbidden") {
		t.Errorf("Err() = %v", err)
	}
	get(ctx, pods)
	if got := logs.take(); got != "" {
		t.Errorf("the same failure within a minute logged again: %q", got)
	}
	now = now.Add(time.Minute)
	get(ctx, pods)
	if got := logs.take(); !strings.Contains(got, "403 Forbidden") {
		t.Errorf("the same failure a minute later not logged again: %q", got)
	}
	status.Store("/api/v1/pods", http.StatusServiceUnavailable)
	get(ctx, pods)
	if got := logs.take(); !strings.Contains(got, "503 Service Unavailable") {
		t.Errorf("a new cause not logged: %q", got)
	}
	status.Store("/api/v1/pods", http.StatusOK)
	get(ctx, pods)
	if got := logs.take(); !strings.Contains(got, "level=INFO") || !strings.Contains(got, "succeeds again") {
		t.Errorf("recovery logged as %q", got)
	}
	if err := m.Err(); err != nil {
		t.Errorf("Err() after the success = %v", err)
	}
	get(ctx, srv.URL+"/api/v1/nodes")
	status.Store("/api/v1/nodes", http.StatusNotFound)
	get(ctx, srv.URL+"/api/v1/nodes")
	if got := logs.take(); got != "" || m.Err() != nil {
		t.Errorf("successes and a 404 logged %q, Err() = %v", got, m.Err())
	}

	// No response: the transport's error is the cause.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + lis.Addr().String() + "/api/v1/nodes"
	lis.Close()
	get(ctx, dead)
	if got := logs.take(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "refused") {
		t.Errorf("a refused connection logged as %q", got)
	}
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("Err() = %v, want it to name %s", err, dead)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	get(cancelled, srv.URL+"/api/v1/namespaces")
	if got := logs.take(); got != "" {
		t.Errorf("a cancelled request logged %q", got)
	}
}

// TestAPIMonitorBounded: the monitor remembers at most 32 failing
// requests, and logs every one.
func TestAPIMonitorBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
	}))
	defer srv.Close()
	var logs logBuffer
	m := cli.NewAPIMonitor(slog.New(slog.NewTextHandler(&logs, nil)))
	client := &http.Client{Transport: m.Wrap(http.DefaultTransport)}
	defer client.CloseIdleConnections()
	for i := range 40 {
		resp, err := client.Get(srv.URL + "/api/v1/namespaces/ns/pods/p" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := strings.Count(logs.take(), "level=ERROR"); n != 40 {
		t.Errorf("%d failures logged, want 40", n)
	}
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "and 29 more") {
		t.Errorf("Err() = %v, want 3 named and 29 more", err)
	}
}

// TestReadyzNamesAPIFailures: while not ready, /readyz gives the
// component's reason and the failing API requests.
func TestReadyzNamesAPIFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	m := cli.NewAPIMonitor(nil)
	client := &http.Client{Transport: m.Wrap(http.DefaultTransport)}
	defer client.CloseIdleConnections()
	resp, err := client.Get(srv.URL + "/api/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	notSynced := errors.New("view not synced")
	for _, tc := range []struct {
		ready error
		code  int
		want  []string
	}{
		{notSynced, http.StatusServiceUnavailable, []string{"view not synced", "GET " + srv.URL + "/api/v1/nodes: 401 Unauthorized"}},
		{nil, http.StatusOK, []string{"ok"}},
	} {
		h := cli.Ops{Ready: func() error { return tc.ready }, API: m}.Handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		for _, w := range tc.want {
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), w) {
				t.Errorf("ready %v: /readyz %d %q, want %d with %q", tc.ready, rec.Code, rec.Body.String(), tc.code, w)
			}
		}
	}
}
