package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrAPI: requests to the API server fail ([APIMonitor.Err]).
var ErrAPI = errors.New("API server requests fail")

// apiRepeat is how often a request that keeps failing with the same cause
// is logged again.
const apiRepeat = time.Minute

// apiMaxFailing bounds the requests an [APIMonitor] remembers as failing.
const apiMaxFailing = 32

// APIMonitor watches a component's requests to the API server, so that
// an unreachable server, a refused credential or a missing permission is
// logged at the default level with its cause and named by /readyz.
// client-go's informers retry such failures of their list and watch
// requests quietly (at -v=2), so a component whose informers never sync
// would otherwise say nothing. Install it with rest.Config.Wrap(m.Wrap).
//
// A request fails when it gets no response (the transport's error, such
// as connection refused or a TLS failure) or a 401, 403 or 5xx status.
// Requests are told apart by method and URL without the query; a failure is logged when it
// starts, when its cause changes and once a minute while it lasts, and
// the request's next success is logged once.
type APIMonitor struct {
	log     *slog.Logger
	now     func() time.Time
	mu      sync.Mutex
	failing map[string]apiFailure // by request: method and URL
}

type apiFailure struct {
	cause  string
	logged time.Time
}

// NewAPIMonitor returns a monitor logging to log (nil discards).
func NewAPIMonitor(log *slog.Logger) *APIMonitor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &APIMonitor{log: log, now: time.Now, failing: map[string]apiFailure{}}
}

// Wrap returns rt with every request's outcome recorded; its signature
// is client-go's transport.WrapperFunc.
func (m *APIMonitor) Wrap(rt http.RoundTripper) http.RoundTripper {
	return apiRoundTripper{next: rt, m: m}
}

type apiRoundTripper struct {
	next http.RoundTripper
	m    *APIMonitor
}

func (a apiRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(req)
	var cause string
	switch {
	case err != nil && req.Context().Err() != nil:
		return resp, err // the caller gave up: not the server's failure
	case err != nil:
		cause = err.Error()
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden, resp.StatusCode >= 500:
		cause = resp.Status
	}
	a.m.record(req.Method+" "+req.URL.Scheme+"://"+req.URL.Host+req.URL.Path, cause)
	return resp, err
}

// record notes request's outcome: cause "" is a success.
func (m *APIMonitor) record(request, cause string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prev, wasFailing := m.failing[request]
	if cause == "" {
		if wasFailing {
			delete(m.failing, request)
			m.log.Info("API server request succeeds again", "request", request)
		}
		return
	}
	now := m.now()
	if wasFailing && prev.cause == cause && now.Sub(prev.logged) < apiRepeat {
		return
	}
	m.log.Error("API server request failed", "request", request, "err", cause)
	if wasFailing || len(m.failing) < apiMaxFailing {
		m.failing[request] = apiFailure{cause: cause, logged: now}
	}
}

// Err returns nil while no request fails, else an error wrapping
// [ErrAPI] that names up to three failing requests and their causes.
func (m *APIMonitor) Err() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.failing) == 0 {
		return nil
	}
	requests := make([]string, 0, len(m.failing))
	for r := range m.failing {
		requests = append(requests, r)
	}
	slices.Sort(requests)
	var parts []string
	for _, r := range requests[:min(3, len(requests))] {
		parts = append(parts, r+": "+m.failing[r].cause)
	}
	if len(requests) > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", len(requests)-3))
	}
	return fmt.Errorf("%w: %s", ErrAPI, strings.Join(parts, "; "))
}
