package kube

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/reservation"
)

// freshness records whether the cache holds a consistent listing with no
// watch gap since. The reflector's calls (through trackingListWatch and
// podStore) move it; Err reads it.
//
// Each applied listing opens an epoch and grants one watch. A watch call
// consumes the grant; a watch call without one is refused, so the
// reflector relists. The epoch's watch ending, or its call failing, makes
// the cache stale until the next listing is applied.
type freshness struct {
	synced chan struct{} // closed once the first listing is applied

	mu         sync.Mutex
	epoch      uint64 // incremented by every applied listing
	fresh      bool   // a listing was applied and its watch has not ended
	mayWatch   bool   // the listing of this epoch has not been watched from yet
	listedOnce bool   // a listing was ever applied
}

func newFreshness() *freshness { return &freshness{synced: make(chan struct{})} }

// listed records a listing applied to the cache.
func (f *freshness) listed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch++
	f.fresh, f.mayWatch = true, true
	if !f.listedOnce {
		f.listedOnce = true
		close(f.synced)
	}
}

// startWatch consumes the current listing's grant to watch from it. It
// reports the epoch the watch belongs to and false, making the cache
// stale, when there is no grant.
func (f *freshness) startWatch() (epoch uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mayWatch {
		f.fresh = false
		return f.epoch, false
	}
	f.mayWatch = false
	return f.epoch, true
}

// watchEnded makes the cache stale when the watch of epoch, the current
// one, ended or could not start. It reports whether it did.
func (f *freshness) watchEnded(epoch uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch != f.epoch || !f.fresh {
		return false
	}
	f.fresh = false
	return true
}

func (f *freshness) hasSynced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listedOnce
}

// err returns nil while the cache is fresh, else ErrNotSynced or ErrStale.
func (f *freshness) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.listedOnce:
		return ErrNotSynced
	case !f.fresh:
		return ErrStale
	}
	return nil
}

// errMustRelist answers a watch call that has no listing to continue.
func errMustRelist() error {
	return apierrors.NewResourceExpired("kube: the pod watch ended; relisting consistently before watching again")
}

// errNoWatchList refuses a watch-list (streaming) request.
var errNoWatchList = errors.New("kube: watch-list streaming is not used; list instead")

// trackingListWatch lists and watches the node's pods, remembers whether
// the last call failed, and enforces the freshness rules: every list is a
// consistent read, and a watch may only continue the listing just applied.
type trackingListWatch struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger
	fresh  *freshness

	mu  sync.Mutex
	err *ListingError // the last call's error, nil after a success
}

var (
	_ cache.ListerWatcherWithContext = (*trackingListWatch)(nil)
	_ cache.ListerWatcher            = (*trackingListWatch)(nil)
)

func (lw *trackingListWatch) options(opts metav1.ListOptions) metav1.ListOptions {
	opts.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", lw.node).String()
	return opts
}

// ListWithContext lists the node's pods (one page when paginated) with a
// consistent read: whatever resourceVersion the reflector asks for
// ("0" lets the API server answer from its watch cache, which may lag),
// the request carries resourceVersion "" and no resourceVersionMatch.
func (lw *trackingListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts = lw.options(opts)
	opts.ResourceVersion = ""
	opts.ResourceVersionMatch = ""
	obj, err := lw.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
	lw.record("list", err)
	return obj, err
}

// WatchWithContext watches the node's pods, continuing the listing just
// applied; without one it answers "resource expired" so that the
// reflector relists first.
func (lw *trackingListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		return nil, errNoWatchList
	}
	epoch, ok := lw.fresh.startWatch()
	if !ok {
		lw.log.Debug("pod watch ended; relisting", "node", lw.node)
		return nil, errMustRelist()
	}
	w, err := lw.client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, lw.options(opts))
	lw.record("watch", err)
	if err != nil {
		lw.fresh.watchEnded(epoch)
		return nil, err
	}
	return &trackedWatch{Interface: w, end: func() { lw.watchEnded(epoch) }}, nil
}

func (lw *trackingListWatch) watchEnded(epoch uint64) {
	if lw.fresh.watchEnded(epoch) {
		lw.log.Debug("pod watch ended; snapshots are incomplete until relisted", "node", lw.node)
	}
}

// List implements the deprecated cache.Lister; the reflector uses
// ListWithContext.
func (lw *trackingListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

// Watch implements the deprecated cache.Watcher; the reflector uses
// WatchWithContext.
func (lw *trackingListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// IsWatchListSemanticsUnSupported opts out of watch-list streaming, so
// that every listing is a plain consistent list this wrapper observes.
func (lw *trackingListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *trackingListWatch) record(op string, err error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		// The source is stopping; Err reports ErrNotRunning soon.
	case err != nil:
		if lw.err == nil {
			lw.log.Warn("pod listing failed; snapshots are incomplete", "node", lw.node, "op", op, "err", err)
		}
		lw.err = &ListingError{Node: lw.node, Op: op, Err: err}
	case lw.err != nil:
		lw.log.Info("pod listing recovered", "node", lw.node, "op", op)
		lw.err = nil
	}
}

func (lw *trackingListWatch) lastError() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err == nil {
		return nil
	}
	return lw.err
}

// trackedWatch reports when the reflector stops a watch. The reflector
// stops every watch it ends, whether the server closed it, sent an error
// event or the source is stopping, before it does anything else.
type trackedWatch struct {
	watch.Interface
	once sync.Once
	end  func()
}

func (w *trackedWatch) Stop() {
	w.once.Do(w.end)
	w.Interface.Stop()
}

// podStore is the reflector's store: a plain keyed store that applies
// every change synchronously, so that a listing counts as applied (and the
// cache as fresh) exactly when Replace returns. onChange, when set, is
// called after each change with the pod before it (nil when added) and
// after it (nil when deleted).
//
// The store also dates each pod's reservation claim (records): see
// recordSeen.
type podStore struct {
	pods     cache.Store
	fresh    *freshness
	onChange func(old, cur *corev1.Pod)
	onDelete func(last *corev1.Pod) // a pod deleted, or missing from a listing
	records  *records
	changes  changeSignal
}

// changeSignal tells waiters that the store changed: the channel of
// [changeSignal.next] is closed by the first [changeSignal.fire] after it
// was taken.
type changeSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// next returns a channel closed at the next change.
func (c *changeSignal) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// fire wakes every waiter of the channel [changeSignal.next] gave out.
func (c *changeSignal) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

var _ cache.ReflectorStore = (*podStore)(nil)

func newPodStore(fresh *freshness, clk clock.PassiveClock, node string, schedulers []string,
	initial map[types.UID]Observation, onChange func(map[types.UID]Observation)) *podStore {
	seen := make(map[types.UID]recordSeen, len(initial))
	for uid, o := range initial {
		seen[uid] = recordSeen{claim: o.Claim, at: o.At, scheduled: o.Scheduled, started: o.Started, restored: true}
	}
	return &podStore{pods: cache.NewStore(cache.MetaNamespaceKeyFunc), fresh: fresh,
		records: &records{clock: clk, node: node, schedulers: slices.Clone(schedulers), seen: seen, onChange: onChange}}
}

// Observation is the first observation of one pod's reservation claim, as
// a [NodePodSource] dates it (see its "First observations of records"),
// in a form a caller can keep across restarts
// (NodePodSourceOptions.Observations).
type Observation struct {
	// Claim is the claim observed: the scheduled fields of the pod's
	// record, in the source's own comparable form ([ClaimOf]); "" for a
	// pod observed without a record.
	Claim string
	// At is when the claim was first observed.
	At time.Time
	// Scheduled reports that the claim arrived with the binding of one of
	// the configured schedulers (reservation.Pod.RecordScheduled).
	Scheduled bool
	// Started reports that the pod's containers had already started when
	// the claim was first observed (reservation.Pod.RecordStarted).
	Started bool
}

// ClaimOf returns the claim an annotation value makes, in the comparable
// form of [Observation.Claim]: the record's scheduled fields, runtime
// identities left out, re-encoded; a value that does not decode is
// claimed as it is. "" claims nothing.
func ClaimOf(value string) string {
	if value == "" {
		return ""
	}
	return claimOf(value)
}

// ValidClaim reports whether claim is one [ClaimOf] can return.
func ValidClaim(claim string) bool {
	switch {
	case claim == "":
		return true
	case strings.HasPrefix(claim, "raw:"):
		_, err := reservation.DecodeString(claim[len("raw:"):])
		return claim != "raw:" && err != nil
	case strings.HasPrefix(claim, "scheduled:"):
		return ClaimOf(claim[len("scheduled:"):]) == claim
	}
	return false
}

// recordSeen is the first observation of one pod's reservation claim: the
// scheduled fields of its hami.io/vgpu-mig-allocations record. Runtime
// identities, which the device plugin adds after scheduling, do not
// change the claim, so a pod's own realization keeps its time. A pod the
// store holds without a record has an entry with an empty value, so that
// a claim added later is known not to have arrived with the pod.
type recordSeen struct {
	value string    // the annotation value last observed
	claim string    // its scheduled part; the value itself when it does not decode
	at    time.Time // when the claim was first observed
	// scheduled: the claim was on the pod when the store first saw the
	// pod, and the pod then carried PodScheduled=True (see podBound).
	scheduled bool
	// started: the store first saw the pod, with the claim, only after
	// the kubelet had admitted it (Admitted).
	started bool
	// restored: the entry comes from NodePodSourceOptions.Observations and
	// the store has not seen the pod since; value is unknown.
	restored bool
}

// records dates the claims of the pods the store holds. Every pod of one
// listing that the store did not already hold with the same claim gets
// that listing's time, so the pods of the first listing (after a restart)
// all share one time and none of them wins a conflict against another.
type records struct {
	clock clock.PassiveClock
	node  string // pods of other nodes (clients that ignore the field selector) are not held
	// schedulers are the scheduler names whose binds may mark a claim
	// scheduled (NodePodSourceOptions.SchedulerNames).
	schedulers []string

	// onChange, when set, is called with every observation after each
	// change of a claim, its time or its scheduled mark, and after a pod
	// is forgotten; the caller holds mu.
	onChange func(map[types.UID]Observation)

	mu   sync.Mutex
	seen map[types.UID]recordSeen
}

// changed reports the observations to onChange.
func (r *records) changed() {
	if r.onChange == nil {
		return
	}
	out := make(map[types.UID]Observation, len(r.seen))
	for uid, e := range r.seen {
		out[uid] = Observation{Claim: e.claim, At: e.at, Scheduled: e.scheduled, Started: e.started}
	}
	r.onChange(out)
}

// claimOf returns the part of an annotation value that claims hardware.
func claimOf(value string) string {
	allocs, err := reservation.DecodeString(value)
	if err != nil {
		return "raw:" + value
	}
	for i := range allocs {
		allocs[i] = allocs[i].Scheduled()
	}
	return "scheduled:" + reservation.EncodeString(allocs)
}

// observe records pod's claim as seen at now unless it was seen before.
// A claim is scheduled only when it is on the pod at the store's first
// sight of the pod and the pod is bound (podBound): a scheduler extender
// writes the record in the binding itself, so a claim that appears or
// changes on a pod the node already holds is never a scheduler's. The
// caller holds r.mu.
//
// A restored entry (NodePodSourceOptions.Observations) stands for the
// store's own earlier sight of the pod: the same claim keeps its time and
// mark, another one is a changed claim. It reports whether the claim, its
// time or its mark changed.
func (r *records) observe(pod *corev1.Pod, now time.Time) bool {
	old, ok := r.seen[pod.UID]
	if pod.Spec.NodeName != r.node {
		delete(r.seen, pod.UID)
		return ok
	}
	value := pod.Annotations[reservation.AnnotationKey]
	if value == "" {
		r.seen[pod.UID] = recordSeen{at: now}
		return !ok || old.claim != ""
	}
	if ok && !old.restored && old.value == value {
		return false
	}
	claim := claimOf(value)
	if ok && old.claim == claim {
		old.value, old.restored = value, false
		r.seen[pod.UID] = old
		return false
	}
	r.seen[pod.UID] = recordSeen{value: value, claim: claim, at: now, scheduled: !ok && r.byOurScheduler(pod), started: !ok && Admitted(pod)}
	return true
}

// byOurScheduler reports whether pod names one of r.schedulers and was
// bound (podBound). Any scheduler's binding sets the condition, and the
// cluster's default scheduler binds a pod with a copied record as it is,
// so only the schedulers whose extender writes records are believed.
func (r *records) byOurScheduler(pod *corev1.Pod) bool {
	return slices.Contains(r.schedulers, pod.Spec.SchedulerName) && podBound(pod)
}

// podBound reports whether pod carries the PodScheduled=True condition.
// The API server sets it when it binds a pod (the pods/binding
// subresource); a pod created with spec.nodeName preset has its status
// cleared on create and gets the condition only when the kubelet first
// writes its status, after admission. A pod's creator cannot write status
// without the pods/status permission.
func podBound(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (r *records) update(pod *corev1.Pod) {
	if pod == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.observe(pod, r.clock.Now()) {
		r.changed()
	}
}

func (r *records) forget(pod *corev1.Pod) {
	if pod == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[pod.UID]; ok {
		delete(r.seen, pod.UID)
		r.changed()
	}
}

// replace observes a listing at one time and forgets the pods it lacks.
func (r *records) replace(items []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	listed := make(map[types.UID]bool, len(items))
	changed := false
	for _, it := range items {
		if p, ok := it.(*corev1.Pod); ok {
			listed[p.UID] = true
			changed = r.observe(p, now) || changed
		}
	}
	for uid := range r.seen {
		if !listed[uid] {
			delete(r.seen, uid)
			changed = true
		}
	}
	if changed {
		r.changed()
	}
}

// at returns the first observation of pod's current claim (see
// observe), or the zero recordSeen when the store has not observed this
// very annotation value (the pod changed between the caller's read and
// the store's) or the pod has no record.
func (r *records) at(pod *corev1.Pod) recordSeen {
	if pod == nil {
		return recordSeen{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.seen[pod.UID]
	if !ok || e.restored || e.value == "" || e.value != pod.Annotations[reservation.AnnotationKey] {
		return recordSeen{}
	}
	return e
}

func (s *podStore) old(obj any) *corev1.Pod {
	old, ok, err := s.pods.Get(obj)
	if err != nil || !ok {
		return nil
	}
	p, _ := old.(*corev1.Pod)
	return p
}

func (s *podStore) notify(old, cur *corev1.Pod) {
	if s.onChange != nil && (old != nil || cur != nil) {
		s.onChange(old, cur)
	}
}

// Add stores a pod the watch reports added.
func (s *podStore) Add(obj any) error { return s.Update(obj) }

// Update stores a pod the watch reports changed.
func (s *podStore) Update(obj any) error {
	old := s.old(obj)
	if err := s.pods.Update(obj); err != nil {
		return err
	}
	cur, _ := obj.(*corev1.Pod)
	s.records.update(cur)
	s.changes.fire()
	s.notify(old, cur)
	return nil
}

// Delete removes a pod the watch reports deleted.
func (s *podStore) Delete(obj any) error {
	if err := s.pods.Delete(obj); err != nil {
		return err
	}
	p, _ := obj.(*corev1.Pod)
	s.records.forget(p)
	s.deleted(p)
	s.changes.fire()
	s.notify(p, nil)
	return nil
}

func (s *podStore) deleted(last *corev1.Pod) {
	if last != nil && s.onDelete != nil {
		s.onDelete(last)
	}
}

// Replace installs a complete listing, then marks the cache fresh, then
// reports what the listing changed.
func (s *podStore) Replace(items []any, rv string) error {
	before := make(map[string]*corev1.Pod)
	for _, it := range s.pods.List() {
		if p, ok := it.(*corev1.Pod); ok {
			before[p.Namespace+"/"+p.Name] = p
		}
	}
	if err := s.pods.Replace(items, rv); err != nil {
		return err
	}
	s.records.replace(items)
	s.deletedDuringGap(before, items)
	s.fresh.listed()
	s.changes.fire()
	if s.onChange == nil {
		return nil
	}
	for _, it := range items {
		p, ok := it.(*corev1.Pod)
		if !ok {
			continue
		}
		key := p.Namespace + "/" + p.Name
		old := before[key]
		delete(before, key)
		if old != nil && old.UID != p.UID {
			// Deleted and created again under the same name (a
			// StatefulSet pod) during the watch gap: two pods.
			s.onChange(old, nil)
			old = nil
		}
		s.onChange(old, p)
	}
	for _, old := range before {
		s.onChange(old, nil)
	}
	return nil
}

// deletedDuringGap reports the pods of before that the listing items no
// longer holds (by UID: a name may have been taken by a new pod) as
// deleted.
func (s *podStore) deletedDuringGap(before map[string]*corev1.Pod, items []any) {
	if s.onDelete == nil {
		return
	}
	listed := make(map[types.UID]bool, len(items))
	for _, it := range items {
		if p, ok := it.(*corev1.Pod); ok {
			listed[p.UID] = true
		}
	}
	for _, old := range before {
		if !listed[old.UID] {
			s.onDelete(old)
		}
	}
}

// Resync does nothing: the source has no resync period.
func (s *podStore) Resync() error { return nil }

// notifyInactive calls fn when a change of one of the node's pods makes it
// inactive or released: deleted (cur nil), terminal, or released.
func (s *NodePodSource) notifyInactive(fn func(reservation.Pod), old, cur *corev1.Pod) {
	switch {
	case cur == nil:
		if old.Spec.NodeName == s.node {
			fn(s.View(old))
		}
	case old == nil || cur.Spec.NodeName != s.node:
	default:
		now := s.clock.Now()
		oldView, curView := s.View(old), s.View(cur)
		if !Terminal(old) && Terminal(cur) || !oldView.Released(now) && curView.Released(now) {
			fn(curView)
		}
	}
}
