package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/realize"
)

// HealthRecordAnnotation is the node annotation in which the plugin
// records the GPUs it took out of service, with the cause and the time,
// so that a restart keeps them out ([HealthRecord]).
const HealthRecordAnnotation = "dynmig.io/gpu-health"

// ErrHealthRecord: the node's [HealthRecordAnnotation] cannot be read.
var ErrHealthRecord = errors.New("deviceplugin: invalid GPU health record")

// HealthRecordError names what of a health record cannot be read: the
// GPU entry (its position, -1 for the record as a whole) and the field.
type HealthRecordError struct {
	Entry int
	Field string
	Err   error
}

func (e *HealthRecordError) Error() string {
	where := "record"
	if e.Entry >= 0 {
		where = fmt.Sprintf("gpus[%d]", e.Entry)
	}
	if e.Field != "" {
		where += "." + e.Field
	}
	return fmt.Sprintf("deviceplugin: annotation %s: %s: %v", HealthRecordAnnotation, where, e.Err)
}

// Unwrap returns [ErrHealthRecord] and the cause.
func (e *HealthRecordError) Unwrap() []error { return []error{ErrHealthRecord, e.Err} }

// HealthRecord is the value of [HealthRecordAnnotation]: the GPUs of the
// node that failed as a whole, written by the plugin whenever that set
// changes. It is the plugin's own durable record of health, read back at
// startup (see the package documentation).
type HealthRecord struct {
	// BootID is the node's boot ID (the kubelet's
	// status.nodeInfo.bootID) when the record was written: a record from
	// another boot is dropped, since a reboot resets the GPUs.
	BootID string            `json:"bootID,omitempty"`
	GPUs   []GPUHealthRecord `json:"gpus"`
}

// GPUHealthRecord is one failed GPU, by UUID (NVML indices may change
// across reboots).
type GPUHealthRecord struct {
	UUID  string    `json:"uuid"`
	Cause string    `json:"cause"` // realize.HealthCause.String(), e.g. "xid"
	Xid   uint64    `json:"xid,omitempty"`
	Since time.Time `json:"since"` // when the plugin saw the failure
}

// recordedCause reports whether a GPU unhealthy for c is recorded: the
// failures the hardware reported. The others are found again by the next
// watch (registration, unmonitored) or are not failures.
func recordedCause(c realize.HealthCause) bool {
	switch c {
	case realize.CauseUnknown, realize.CauseXid, realize.CauseDoubleBitECC, realize.CauseUnavailable, realize.CauseWatchFailed:
		return true
	}
	return false
}

// DecodeHealthRecord reads a [HealthRecordAnnotation] value. Every entry
// needs a "GPU-" UUID (each once), a recorded cause ("xid" with its Xid,
// "double-bit-ecc", "unavailable", "watch-failed" or "unknown") and a
// time; anything else is a [*HealthRecordError]. Unknown keys are
// ignored, so that a newer plugin's record still reads.
func DecodeHealthRecord(v string) (HealthRecord, error) {
	var r HealthRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return HealthRecord{}, &HealthRecordError{Entry: -1, Err: err}
	}
	for i, g := range r.GPUs {
		if !strings.HasPrefix(g.UUID, "GPU-") {
			return HealthRecord{}, &HealthRecordError{Entry: i, Field: "uuid", Err: fmt.Errorf("%q is not a GPU UUID", g.UUID)}
		}
		if slices.ContainsFunc(r.GPUs[:i], func(o GPUHealthRecord) bool { return o.UUID == g.UUID }) {
			return HealthRecord{}, &HealthRecordError{Entry: i, Field: "uuid", Err: fmt.Errorf("%s recorded twice", g.UUID)}
		}
		c, ok := realize.ParseHealthCause(g.Cause)
		if !ok || !recordedCause(c) {
			return HealthRecord{}, &HealthRecordError{Entry: i, Field: "cause", Err: fmt.Errorf("%q is not a recorded failure", g.Cause)}
		}
		if (c == realize.CauseXid) != (g.Xid != 0) {
			return HealthRecord{}, &HealthRecordError{Entry: i, Field: "xid", Err: fmt.Errorf("xid %d with cause %q", g.Xid, g.Cause)}
		}
		if g.Since.IsZero() {
			return HealthRecord{}, &HealthRecordError{Entry: i, Field: "since", Err: errors.New("missing")}
		}
	}
	return r, nil
}

// Encode returns the annotation value: compact JSON, GPUs by UUID.
func (r HealthRecord) Encode() string {
	r.GPUs = slices.Clone(r.GPUs)
	slices.SortFunc(r.GPUs, func(a, b GPUHealthRecord) int { return strings.Compare(a.UUID, b.UUID) })
	for i := range r.GPUs {
		r.GPUs[i].Since = r.GPUs[i].Since.UTC().Truncate(time.Second)
	}
	if r.GPUs == nil {
		r.GPUs = []GPUHealthRecord{}
	}
	b, _ := json.Marshal(r) // strings, integers and times: cannot fail
	return string(b)
}

// event is the health event the entry restores on the GPU with index gpu.
func (g GPUHealthRecord) event(gpu int) realize.HealthEvent {
	c, _ := realize.ParseHealthCause(g.Cause)
	return realize.HealthEvent{GPU: gpu, GI: realize.NoInstance, CI: realize.NoInstance, Cause: c, Xid: g.Xid}
}

// restoreHealth reads the node's health record at startup and marks the
// GPUs it names unhealthy again, with their recorded cause, unless the
// node rebooted since (another boot ID: the GPUs were reset). A record
// that cannot be read is logged and replaced at the next write; a failed
// read of the node is returned.
func (p *Plugin) restoreHealth(ctx context.Context) error {
	node, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("deviceplugin: read node %q for its GPU health record: %w", p.cfg.Node, err)
	}
	v, ok := node.Annotations[HealthRecordAnnotation]
	if !ok {
		return nil
	}
	rec, err := DecodeHealthRecord(v)
	if err != nil {
		p.log.Error("GPU health record cannot be read; it is replaced at the next write", "err", err)
		return nil
	}
	boot := node.Status.NodeInfo.BootID
	if rec.BootID != "" && boot != "" && rec.BootID != boot {
		p.log.Info("GPU health record is from an earlier boot: the GPUs were reset since, so it is dropped",
			"recorded_boot", rec.BootID, "boot", boot, "gpus", len(rec.GPUs))
		return nil
	}
	p.refreshHolders(ctx) // the pods the restored failures hit, for ListAndWatch
	recorded := map[string]bool{}
	for _, g := range rec.GPUs {
		index, ok := p.gpuIndex(g.UUID)
		if !ok {
			p.log.Warn("GPU health record names a GPU this node no longer has; dropped", "uuid", g.UUID)
			continue
		}
		e := g.event(index)
		_, changed := p.health.applyAt(e, g.Since)
		recorded[g.UUID] = true
		if changed {
			p.log.Warn("GPU stays unhealthy across the restart, as recorded", "event", e.String(), "since", g.Since)
			p.recordHealthEvent(ctx, e)
		}
	}
	p.health.recMu.Lock()
	p.health.recorded = recorded
	p.health.recMu.Unlock()
	return nil
}

// healthRecord builds the record of the GPUs unhealthy now for a
// recorded cause.
func (p *Plugin) healthRecord(boot string) HealthRecord {
	p.mu.Lock()
	gpus := slices.Clone(p.gpus)
	p.mu.Unlock()
	rec := HealthRecord{BootID: boot}
	for _, g := range gpus {
		why, since, bad := p.health.why(g.Index)
		if !bad || !recordedCause(why.Cause) {
			continue
		}
		rec.GPUs = append(rec.GPUs, GPUHealthRecord{UUID: g.UUID, Cause: why.Cause.String(), Xid: why.Xid, Since: since})
	}
	return rec
}

// syncHealthRecord brings the node's health record in line with the
// plugin's health. A GPU the plugin recorded whose entry is gone from a
// readable record was cleared by an operator: it is made healthy
// ([realize.CauseCleared]) first, and an Event says so. Then the record is
// written when it differs (removed when no GPU is left). It runs in one
// goroutine at a time (healthTracker.recMu).
func (p *Plugin) syncHealthRecord(ctx context.Context) error {
	p.health.recMu.Lock()
	defer p.health.recMu.Unlock()
	node, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("deviceplugin: read node %q for its GPU health record: %w", p.cfg.Node, err)
	}
	cur, present := node.Annotations[HealthRecordAnnotation]
	if rec, err := DecodeHealthRecord(cur); !present || err == nil {
		for uuid := range p.health.recorded {
			if slices.ContainsFunc(rec.GPUs, func(g GPUHealthRecord) bool { return g.UUID == uuid }) {
				continue
			}
			delete(p.health.recorded, uuid)
			index, ok := p.gpuIndex(uuid)
			if !ok {
				continue
			}
			e := realize.HealthEvent{GPU: index, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: true, Cause: realize.CauseCleared}
			if _, changed := p.health.applyAt(e, p.cfg.Clock.Now()); changed {
				p.log.Warn("an operator cleared the GPU's health record; it takes new MIG instances again", "event", e.String())
				p.recordHealthEvent(ctx, e)
			}
		}
	}
	want := p.healthRecord(node.Status.NodeInfo.BootID)
	value := want.Encode()
	var patch []byte
	switch {
	case len(want.GPUs) == 0 && !present:
	case len(want.GPUs) == 0:
		patch = []byte(`{"metadata":{"annotations":{"` + HealthRecordAnnotation + `":null}}}`)
	case !present || cur != value:
		patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{HealthRecordAnnotation: value}}})
	}
	if patch != nil {
		if _, err := p.cfg.Client.CoreV1().Nodes().Patch(ctx, p.cfg.Node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("deviceplugin: write the GPU health record of node %q: %w", p.cfg.Node, err)
		}
	}
	p.health.recorded = map[string]bool{}
	for _, g := range want.GPUs {
		p.health.recorded[g.UUID] = true
	}
	return nil
}
