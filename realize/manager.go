package realize

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dynmig/dynmig/internal/leaf/gpulock"
)

// Options configures a [Manager]. The zero value works: no logging, MIG mode
// left as it is, a 30 s bound on rollback and release work that outlives a
// cancelled request.
type Options struct {
	// Logger receives structured logs of every hardware mutation, adoption,
	// conflict and skipped reconcile. Nil discards them.
	Logger *slog.Logger

	// EnableMIG lets [Manager.Adopt] switch MIG mode on for idle GPUs
	// whose MIG mode is disabled, through the backend's [MIGModeSetter]:
	// never a GPU that runs processes or that a reservation names, and only
	// with a snapshot that authorises cleaning. Without it such GPUs are
	// only reported. A change the driver leaves pending until a GPU reset
	// (NVIDIA's MIG User Guide says A100 and A30 need one) is reported in
	// [GPUReport.MIGModeErr] as [ErrResetRequired]; the manager never
	// resets a GPU.
	EnableMIG bool

	// CleanupTimeout bounds rollback work after the request's context was
	// cancelled: a rollback must still destroy what the attempt created,
	// so it runs on a context detached from the request's cancellation
	// with this timeout. Zero means 30 seconds.
	CleanupTimeout time.Duration

	// AbsentPodGrace protects newly realized or adopted instances from an
	// informer that lags: when an instance's pod is missing from an
	// otherwise complete listing (rather than listed as ended), reconcile
	// releases it only once the instance had been managed this long when
	// the listing was taken (reservation.Snapshot.Now, Demand.Now), so an
	// instance realized after the listing is never released for its
	// absence. Pods listed as deleting, Succeeded or Failed are released
	// at once. Zero means 1 minute; a negative value disables the grace.
	AbsentPodGrace time.Duration

	// Now returns the current time, for AbsentPodGrace and LeakInterval.
	// Nil means time.Now.
	Now func() time.Time

	// LeakInterval is how often [Manager.Maintain] collects leaks. Zero
	// means 10 minutes.
	LeakInterval time.Duration
}

// Manager realizes scheduler reservations as MIG instances on one node and
// reclaims them. Create it with [NewManager]; it is safe for concurrent use.
// See the package documentation for its model and safety rules.
type Manager struct {
	hw        Realizer
	log       *slog.Logger
	enableMIG bool
	cleanup   time.Duration
	grace     time.Duration
	now       func() time.Time

	// mu guards managed. It is never held during a hardware call;
	// hardware mutation is serialised per GPU by locks.
	mu      sync.Mutex
	managed map[Key]*record
	locks   gpulock.Set
	// owners serialises Allocate calls for one container, end to end.
	owners containerLocks

	// Maintain's state: whether adoption has settled, and when leaks
	// were last collected.
	adoptSettled atomic.Bool
	leakInterval time.Duration
	leakMu       sync.Mutex
	lastLeakPass time.Time

	stats counters
}

// record is the manager's state for one managed instance. Records are
// never mutated once published in managed; they are replaced or removed
// under the GPU's lock, so a pointer comparison tells whether a record
// read earlier is still current.
type record struct {
	ManagedInstance
	since time.Time // when the manager took it over
}

type counters struct {
	creates, destroys, adoptions, conflicts, skippedReconciles,
	rollbacks, leaksCollected, reconciles atomic.Uint64
	leaks atomic.Int64 // unmanaged instances left by the latest Adopt or CollectLeaks
}

// Stats is a snapshot of a manager's counters since it was created. The
// zero value is a fresh manager's.
type Stats struct {
	Creates           uint64 // instances created (GI and CI)
	Destroys          uint64 // instances destroyed (reclaim, rollback, cleanup, leak collection)
	Adoptions         uint64 // live instances adopted after verification
	Conflicts         uint64 // reservations refused with ErrConflict
	SkippedReconciles uint64 // reconcile and leak-collection passes that were not authorised
	Reconciles        uint64 // reconcile passes run, authorised or not
	Rollbacks         uint64 // Allocate attempts rolled back
	LeaksCollected    uint64 // unmanaged instances destroyed by CollectLeaks
	Managed           int    // instances managed now
	// Leaks counts the unmanaged instances the latest Adopt or
	// CollectLeaks found and left on the hardware.
	Leaks int
}

// NewManager returns a manager driving hw. It touches no hardware: call
// [Manager.Maintain] at startup and periodically to recover state, clean
// idle GPUs, reclaim and collect leaks.
func NewManager(hw Realizer, opts Options) *Manager {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cleanup := opts.CleanupTimeout
	if cleanup <= 0 {
		cleanup = 30 * time.Second
	}
	grace := opts.AbsentPodGrace
	if grace == 0 {
		grace = time.Minute
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	leakInterval := opts.LeakInterval
	if leakInterval <= 0 {
		leakInterval = defaultLeakInterval
	}
	return &Manager{
		leakInterval: leakInterval,
		hw:           hw,
		log:          log,
		enableMIG:    opts.EnableMIG,
		cleanup:      cleanup,
		grace:        grace,
		now:          now,
		managed:      make(map[Key]*record),
	}
}

// Stats returns a snapshot of the manager's counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	n := len(m.managed)
	m.mu.Unlock()
	return Stats{
		Creates:           m.stats.creates.Load(),
		Destroys:          m.stats.destroys.Load(),
		Adoptions:         m.stats.adoptions.Load(),
		Conflicts:         m.stats.conflicts.Load(),
		SkippedReconciles: m.stats.skippedReconciles.Load(),
		Reconciles:        m.stats.reconciles.Load(),
		Rollbacks:         m.stats.rollbacks.Load(),
		LeaksCollected:    m.stats.leaksCollected.Load(),
		Managed:           n,
		Leaks:             int(m.stats.leaks.Load()),
	}
}

// Managed returns the instances the manager controls, ordered by Key.
func (m *Manager) Managed() []ManagedInstance {
	m.mu.Lock()
	out := make([]ManagedInstance, 0, len(m.managed))
	for _, r := range m.managed {
		out = append(out, r.ManagedInstance)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b ManagedInstance) int { return compareKeys(a.Key, b.Key) })
	return out
}

// compareKeys orders keys by GPU, placement start and size, then profile.
func compareKeys(a, b Key) int {
	return cmp.Or(
		cmp.Compare(a.GPU, b.GPU),
		cmp.Compare(a.Placement.Start, b.Placement.Start),
		cmp.Compare(a.Placement.Size, b.Placement.Size),
		strings.Compare(a.Profile, b.Profile),
	)
}

// lookup returns the record at key, or nil.
func (m *Manager) lookup(key Key) *record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.managed[key]
}

// store stamps and publishes a new record. The caller holds the GPU's
// lock.
func (m *Manager) store(r *record) {
	r.since = m.now()
	m.mu.Lock()
	m.managed[r.Key] = r
	m.mu.Unlock()
}

// forget removes the record at key if it is still r. The caller holds the
// GPU's lock.
func (m *Manager) forget(r *record) {
	m.mu.Lock()
	if m.managed[r.Key] == r {
		delete(m.managed, r.Key)
	}
	m.mu.Unlock()
}

// records returns the current records, for passes that then re-check each
// under its GPU lock.
func (m *Manager) records() []*record {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.managed))
	slices.SortFunc(out, func(a, b *record) int { return compareKeys(a.Key, b.Key) })
	return out
}

// recordByMIG returns the record whose MIG UUID is uuid, or nil.
func (m *Manager) recordByMIG(uuid string) *record {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.managed {
		if r.Runtime.MIGUUID == uuid {
			return r
		}
	}
	return nil
}

// detached returns a context for cleanup work that must finish even when
// the request's ctx was cancelled, bounded by the cleanup timeout.
func (m *Manager) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), m.cleanup)
}
