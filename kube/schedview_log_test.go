package kube_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
)

// levelCounter counts log records by level.
type levelCounter struct {
	mu     sync.Mutex
	counts map[slog.Level]int
}

func (h *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Level]++
	return nil
}
func (h *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelCounter) WithGroup(string) slog.Handler      { return h }

func (h *levelCounter) count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[l]
}

// Informers deliver a bound pod before its node's registration at every
// extender start: its reservation cannot be counted yet, which is logged
// at debug level, not as a warning. Once the node is known, a reservation
// on a GPU it does not publish is a warning.
func TestSchedulerViewPodBeforeNodeIsNoWarning(t *testing.T) {
	node, gpu := registeredNode(t)
	h := &levelCounter{counts: map[slog.Level]int{}}
	v := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}), kube.SchedulerViewOptions{Logger: slog.New(h)})

	v.PodHandler().OnAdd(reserved(gpuPod("early", 1, 5), "n1", 6, alloc(gpu, "7g.40gb", 0, 8)), true)
	if got := h.count(slog.LevelWarn); got != 0 {
		t.Errorf("warnings for a pod seen before its node = %d, want 0", got)
	}
	if got := h.count(slog.LevelDebug); got == 0 {
		t.Errorf("debug records for a pod seen before its node = %d, want at least 1", got)
	}

	v.NodeHandler().OnAdd(node, true)
	v.PodHandler().OnAdd(reserved(gpuPod("stray", 1, 7), "n1", 8, alloc("GPU-00000000-0000-0000-0000-00000000dead", "7g.40gb", 0, 8)), true)
	if got := h.count(slog.LevelWarn); got == 0 {
		t.Errorf("warnings for a reservation on a GPU the known node lacks = %d, want at least 1", got)
	}
}
