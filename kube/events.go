package kube

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// Events records Kubernetes Events (events.k8s.io/v1) for one component
// through client-go's event broadcaster (k8s.io/client-go/tools/events):
// each Event names the object it regards by a full reference (kind, name,
// namespace and UID, which kubectl describe matches), and repeats of one
// Event are folded into a series instead of new objects. Create it with
// [NewEvents]; it is an events.EventRecorder that records only once
// [Events.Start] started it, until its context ends, and drops what is
// recorded otherwise.
type Events struct {
	client    kubernetes.Interface
	component string

	mu  sync.Mutex
	rec events.EventRecorder // nil unless started
}

var _ events.EventRecorder = (*Events)(nil)

// NewEvents returns the Events of component (the reporting controller)
// over client. It starts nothing.
func NewEvents(client kubernetes.Interface, component string) *Events {
	return &Events{client: client, component: component}
}

// Eventf records an Event regarding an object (a runtime.Object the
// client-go scheme knows, or a *corev1.ObjectReference), as
// events.EventRecorder does. It never blocks: the Event is written
// asynchronously, and a failed write is logged by client-go (through klog)
// and dropped.
func (e *Events) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	e.mu.Lock()
	rec := e.rec
	e.mu.Unlock()
	if rec != nil {
		rec.Eventf(regarding, related, eventtype, reason, action, note, args...)
	}
}

// Start begins writing recorded Events to the API server; recording works
// as soon as it returns. When ctx is done the broadcaster is shut down
// (writes still being retried give up with ctx) and later Events are
// dropped; the returned func waits for that. The broadcaster's goroutines
// run until then.
func (e *Events) Start(ctx context.Context) (wait func()) {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: e.client.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		b.Shutdown()
		return func() {}
	}
	e.mu.Lock()
	e.rec = b.NewRecorder(scheme.Scheme, e.component)
	e.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		e.mu.Lock()
		e.rec = nil
		e.mu.Unlock()
		b.Shutdown()
	}()
	return func() { <-done }
}
