package dradriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// ErrConfig reports a [Config] the driver cannot run with.
var ErrConfig = errors.New("driver: invalid configuration")

// ErrNotSetUp: a DRA call arrived before [Driver.Setup] finished.
var ErrNotSetUp = errors.New("driver: not set up")

// ErrNotAllocated: the claim handed to PrepareResourceClaims has no device
// of this driver in this node's pool.
var ErrNotAllocated = errors.New("driver: claim has no device allocated in this node's pool")

// ErrUnhealthyGPU: a claim's device would need a new MIG instance on a GPU
// whose health watch reported it unhealthy. Nothing is created; the
// kubelet retries. The GPU publishes no devices while it is unhealthy, so
// the scheduler places nothing new there.
var ErrUnhealthyGPU = errors.New("driver: GPU is unhealthy")

// ClaimError names the claim and device a preparation failed on.
type ClaimError struct {
	Claim  string // namespace/name (uid)
	Device string // DRA device name, or "" for the whole claim
	Err    error
}

func (e *ClaimError) Error() string {
	msg := "driver: claim " + e.Claim
	if e.Device != "" {
		msg += " device " + e.Device
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *ClaimError) Unwrap() error { return e.Err }

// Config configures a [Driver]. Node and Hardware are required; Run also
// needs Client, CDIDir and DataDir.
type Config struct {
	// Node is this node's name, which is also the resource pool's name.
	Node string
	// Hardware is the node's MIG backend. If it implements
	// realize.HealthWatcher, GPU health is watched and unhealthy GPUs
	// publish no devices.
	Hardware realize.Realizer
	// HealthChecks say which of the backend's health events count
	// (realize.ParseHealthChecks reads NVIDIA's DP_DISABLE_HEALTHCHECKS
	// and DP_ENABLE_HEALTHCHECKS); the zero value ignores application
	// Xids only.
	HealthChecks realize.HealthChecks
	// Allowlist is the profile policy; nil means
	// capability.DefaultAllowlist(). [Driver.SetAllowlist] changes it.
	Allowlist capability.Allowlist
	// Client is the API client for the claim informer and the
	// ResourceSlices. Setup and the DRA methods do not use it when
	// Claims is set.
	Client kubernetes.Interface
	// Claims lists ResourceClaims; nil means an informer on Client,
	// which Run starts.
	Claims ClaimSource
	// CDIDir is where claim CDI specs are written (the container
	// runtime's CDI directory, e.g. /var/run/cdi).
	CDIDir string
	// DataDir is the plugin's data directory: the checkpoint and, in
	// Run, the DRA socket (e.g. /var/lib/kubelet/plugins/mig.dynmig.io).
	DataDir string
	// RegistrarDir is the kubelet's plugin registration directory; ""
	// means kubeletplugin's default (/var/lib/kubelet/plugins_registry).
	RegistrarDir string
	// MaintainInterval is how often Run reconciles the hardware against
	// the claims (realize.Manager.MaintainDemand). Zero means 30 s.
	MaintainInterval time.Duration
	// Manager configures the realize.Manager; its Logger defaults to
	// Logger.
	Manager realize.Options
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
}

// Driver is a DRA kubelet plugin for dynamic MIG: it publishes the node's
// partitionable MIG devices and realizes exactly the allocated ones. It
// implements kubeletplugin.DRAPlugin. Create it with [New]; it is safe for
// concurrent use.
type Driver struct {
	cfg Config
	log *slog.Logger
	mgr *realize.Manager
	cdi *cdiWriter

	buildMu   sync.Mutex // serialises build
	mu        sync.Mutex
	source    ClaimSource // cfg.Claims, or Run's informer
	setUp     bool
	allowlist capability.Allowlist
	gpus      []capability.GPU
	health    realize.HealthState
	healthed  chan struct{} // closed and replaced when health changes (WatchHealthStatus)
	ck        Checkpoint
	cat       *Catalog

	// ckMu serialises checkpoint updates (read-modify-write of ck and
	// the file).
	ckMu sync.Mutex

	// changed is signalled when the publication may have changed.
	changed chan struct{}
	// publisher receives publications once Run has started the plugin.
	pubMu     sync.Mutex
	publisher func(context.Context, resourceslice.DriverResources) error
	// fatal receives HandleError's fatal errors for Run.
	fatal chan error
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New checks cfg and returns a driver. It touches neither hardware nor
// files: call [Driver.Setup] (or [Driver.Run], which calls it).
func New(cfg Config) (*Driver, error) {
	if cfg.Node == "" {
		return nil, fmt.Errorf("%w: empty node name", ErrConfig)
	}
	if cfg.Hardware == nil {
		return nil, fmt.Errorf("%w: no hardware backend", ErrConfig)
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: empty plugin data directory", ErrConfig)
	}
	if cfg.Claims == nil && cfg.Client == nil {
		return nil, fmt.Errorf("%w: neither a claim source nor an API client", ErrConfig)
	}
	if err := cfg.Allowlist.Validate(); cfg.Allowlist != nil && err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	w, err := newCDIWriter(cfg.CDIDir)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaintainInterval <= 0 {
		cfg.MaintainInterval = 30 * time.Second
	}
	mopts := cfg.Manager
	if mopts.Logger == nil {
		mopts.Logger = log
	}
	allow := cfg.Allowlist
	if allow == nil {
		allow = capability.DefaultAllowlist()
	}
	return &Driver{
		cfg: cfg, log: log, cdi: w,
		mgr:       realize.NewManager(cfg.Hardware, mopts),
		allowlist: allow.Clone(),
		source:    cfg.Claims,
		changed:   make(chan struct{}, 1),
		fatal:     make(chan error, 1),
	}, nil
}

// CheckpointPath is the checkpoint file's path.
func (d *Driver) CheckpointPath() string { return filepath.Join(d.cfg.DataDir, CheckpointFile) }

// Manager returns the driver's realize.Manager.
func (d *Driver) Manager() *realize.Manager { return d.mgr }

// Setup prepares the driver for DRA calls: it reads the checkpoint
// (refusing to go on with a [*CheckpointError]: forgetting prepared
// claims could destroy their instances), discovers the GPUs, builds the
// catalog, and runs one maintenance pass, which adopts the instances of
// prepared claims after a restart. It returns the pass's error, if any,
// after setting up: adoption is retried by later passes.
func (d *Driver) Setup(ctx context.Context) error {
	ck, err := ReadCheckpoint(d.CheckpointPath())
	if err != nil {
		return err
	}
	sortClaims(ck.Claims)
	d.mu.Lock()
	d.ck = ck
	d.mu.Unlock()
	if err := d.Rediscover(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	d.setUp = true
	d.mu.Unlock()
	_, err = d.Maintain(ctx)
	return err
}

// Rediscover reads the GPUs again under the current allowlist and
// rebuilds the publication.
func (d *Driver) Rediscover(ctx context.Context) error {
	d.mu.Lock()
	allow := d.allowlist
	d.mu.Unlock()
	gpus, report, err := capability.Discover(ctx, d.cfg.Hardware, allow)
	if err != nil {
		return fmt.Errorf("driver: discovery: %w", err)
	}
	for _, f := range report.Findings {
		d.log.Info("discovery finding", "finding", f.String())
	}
	d.mu.Lock()
	d.gpus = gpus
	d.mu.Unlock()
	d.rebuild()
	return nil
}

// SetAllowlist changes the profile policy, discovers again and
// republishes. Claims already allocated to profiles the new policy does
// not allow are withheld (respected, never realized) from then on.
func (d *Driver) SetAllowlist(ctx context.Context, a capability.Allowlist) error {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	d.mu.Lock()
	d.allowlist = a.Clone()
	d.mu.Unlock()
	return d.Rediscover(ctx)
}

// rebuild recomputes the catalog from the GPUs, their health, the claim
// listing and the checkpoint, and signals a republish.
func (d *Driver) rebuild() {
	d.build()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// build rebuilds the catalog from the current GPUs, health, claims and
// checkpoint. Builds are serialised, so that one that read older state
// never replaces a newer catalog.
func (d *Driver) build() {
	d.buildMu.Lock()
	defer d.buildMu.Unlock()
	claims, _ := d.claims()
	d.mu.Lock()
	gpus := slices.Clone(d.gpus)
	for i := range gpus {
		if !d.health.GPUHealthy(gpus[i].Index) {
			gpus[i].Unhealthy = true
		}
	}
	ck := d.ck
	d.mu.Unlock()
	// Used decodes the allocations against the same GPUs and policy;
	// decoding does not depend on the order, so an unordered catalog
	// serves.
	dec, err := NewCatalog(d.cfg.Node, gpus, nil)
	if err != nil {
		d.log.Error("catalog", "err", err)
		return
	}
	cat, err := NewCatalog(d.cfg.Node, gpus, dec.Used(claims, ck))
	if err != nil {
		d.log.Error("catalog", "err", err)
		return
	}
	for _, f := range cat.Findings() {
		d.log.Info("publication finding", "finding", f)
	}
	d.mu.Lock()
	d.cat = cat
	d.mu.Unlock()
}

// Catalog returns the current publication, nil before Setup.
func (d *Driver) Catalog() *Catalog {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cat
}

// Checkpoint returns a copy of the prepared claims.
func (d *Driver) Checkpoint() Checkpoint {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cloneCheckpoint(d.ck)
}

func cloneCheckpoint(ck Checkpoint) Checkpoint {
	out := Checkpoint{Claims: slices.Clone(ck.Claims)}
	for i := range out.Claims {
		out.Claims[i].Devices = slices.Clone(out.Claims[i].Devices)
	}
	return out
}

func (d *Driver) claims() ([]*resourceapi.ResourceClaim, bool) {
	d.mu.Lock()
	src := d.source
	d.mu.Unlock()
	if src == nil {
		return nil, false
	}
	return src.Claims()
}

// Demand returns the realize demand of the current claim listing and
// checkpoint, with override (when not nil) in place of the listed claim
// with its UID. A checkpointed claim the listing lacks is released only
// when a read from the API server (a quorum read) confirms it is gone or
// no longer allocated to this node: the informer may lag behind a claim
// the kubelet has just had prepared, whose idle instance would otherwise
// be reclaimed under it. Without Config.Client (a custom Claims source)
// the listing is taken as fresh.
func (d *Driver) Demand(ctx context.Context, override *resourceapi.ResourceClaim) realize.Demand {
	claims, complete := d.claims()
	d.mu.Lock()
	cat, ck := d.cat, d.ck
	d.mu.Unlock()
	if cat == nil {
		return realize.Demand{}
	}
	var gone func(string) bool
	if d.cfg.Client != nil {
		confirmed := map[string]bool{}
		for _, pc := range cat.Unlisted(claims, ck) {
			if override != nil && string(override.UID) == pc.UID {
				continue
			}
			confirmed[pc.UID] = d.claimGone(ctx, cat, pc)
		}
		gone = func(uid string) bool { return confirmed[uid] }
	}
	return cat.Demand(claims, complete, ck, override, gone)
}

// claimGone reports whether the API server confirms that pc's claim no
// longer exists, or is no longer allocated to this node's pool; an error
// confirms nothing.
func (d *Driver) claimGone(ctx context.Context, cat *Catalog, pc PreparedClaim) bool {
	claim, err := d.cfg.Client.ResourceV1().ResourceClaims(pc.Namespace).Get(ctx, pc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	case string(claim.UID) != pc.UID:
		return true
	}
	_, allocated := cat.ClaimDevices(claim)
	return !allocated
}

// Maintain runs one maintenance pass against the current listing: adopt
// until settled, reconcile (destroying only what an authorised listing
// says is released), collect leaks when due. Run calls it every
// MaintainInterval.
func (d *Driver) Maintain(ctx context.Context) (realize.MaintainReport, error) {
	rep, err := d.mgr.MaintainDemand(ctx, d.Demand(ctx, nil))
	if rep.Adopt != nil {
		d.log.Info("adoption", "authorized", rep.Adopt.Authorized, "settled", rep.Settled, "adopted", len(rep.Adopt.Adopted),
			"pending", len(rep.Adopt.Pending), "rejected", len(rep.Adopt.Rejected), "leaks", len(rep.Adopt.Leaks), "err", err)
	}
	if len(rep.Reconcile.Released) > 0 || !rep.Reconcile.Authorized {
		d.log.Info("reconcile", "authorized", rep.Reconcile.Authorized, "released", len(rep.Reconcile.Released), "reasons", len(rep.Reconcile.Reasons))
	}
	return rep, err
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: for each claim
// it realizes exactly the allocated devices of this node's pool through
// the realize.Manager (idempotent: a prepared claim gets the same MIG
// devices again), writes the claim's CDI spec, checkpoints the runtime
// identities and returns one CDI device per MIG device. A claim that
// fails gets its error in its result (wrapped in a [*ClaimError]); the
// kubelet retries it.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devs, err := d.prepare(ctx, claim)
		if err != nil {
			d.log.Warn("prepare failed", "claim", claimRef(claim), "err", err)
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	d.rebuild()
	return out, nil
}

func claimRef(c *resourceapi.ResourceClaim) string {
	return c.Namespace + "/" + c.Name + " (" + string(c.UID) + ")"
}

func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	ref := claimRef(claim)
	cat := d.Catalog()
	if cat == nil {
		return nil, &ClaimError{Claim: ref, Err: ErrNotSetUp}
	}
	devs, ok := cat.ClaimDevices(claim)
	if !ok {
		return nil, &ClaimError{Claim: ref, Err: ErrNotAllocated}
	}
	prepared, _ := d.Checkpoint().Claim(string(claim.UID))
	for _, cd := range devs {
		if cd.Err != nil {
			return nil, &ClaimError{Claim: ref, Device: cd.Device, Err: cd.Err}
		}
		if err := d.checkHealth(cd, prepared); err != nil {
			return nil, &ClaimError{Claim: ref, Device: cd.Device, Err: err}
		}
	}
	got, err := d.mgr.Prepare(ctx, d.Demand(ctx, claim), string(claim.UID))
	if err != nil {
		return nil, &ClaimError{Claim: ref, Err: err}
	}
	byOwner := map[[2]int]reservation.RuntimeIdentity{}
	for _, g := range got {
		byOwner[[2]int{g.Entry.ContainerIndex, g.Entry.DeviceIndex}] = g.Runtime
	}
	pc := PreparedClaim{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name}
	cdiDevs := make([]CDIDevice, 0, len(devs))
	for _, cd := range devs {
		rt, ok := byOwner[[2]int{cd.ContainerIndex, cd.DeviceIndex}]
		if !ok {
			return nil, &ClaimError{Claim: ref, Device: cd.Device, Err: fmt.Errorf("driver: the manager returned no instance for it")}
		}
		pc.Devices = append(pc.Devices, PreparedDevice{
			Request: cd.Request, Device: cd.Device, ContainerIndex: cd.ContainerIndex, DeviceIndex: cd.DeviceIndex,
			Partition: cd.Partition, Runtime: rt,
		})
		cdiDevs = append(cdiDevs, CDIDevice{Device: cd.Device, MIGUUID: rt.MIGUUID})
	}
	ids, err := d.cdi.write(pc.UID, cdiDevs)
	if err != nil {
		return nil, &ClaimError{Claim: ref, Err: err}
	}
	for i := range pc.Devices {
		pc.Devices[i].CDIDevice = ids[i]
	}
	if err := d.updateCheckpoint(func(ck *Checkpoint) {
		ck.Claims = slices.DeleteFunc(ck.Claims, func(c PreparedClaim) bool { return c.UID == pc.UID })
		ck.Claims = append(ck.Claims, pc)
	}); err != nil {
		// The instances stay: a retry is idempotent, and after a crash
		// adoption at the allocated placement finds them again.
		return nil, &ClaimError{Claim: ref, Err: err}
	}
	out := make([]kubeletplugin.Device, len(pc.Devices))
	for i, pd := range pc.Devices {
		out[i] = kubeletplugin.Device{
			Requests:     []string{pd.Request},
			PoolName:     d.cfg.Node,
			DeviceName:   pd.Device,
			CDIDeviceIDs: []string{pd.CDIDevice},
		}
	}
	return out, nil
}

// checkHealth refuses a device that would need a new instance on an
// unhealthy GPU; one already prepared is handed out again.
func (d *Driver) checkHealth(cd ClaimDevice, prepared *PreparedClaim) error {
	if prepared != nil {
		for _, pd := range prepared.Devices {
			if pd.ContainerIndex == cd.ContainerIndex && pd.DeviceIndex == cd.DeviceIndex && pd.Partition == cd.Partition {
				return nil
			}
		}
	}
	cat := d.Catalog()
	g, ok := cat.GPU(cd.Partition.GPUUUID)
	if ok && g.Unhealthy {
		return fmt.Errorf("%w: GPU %d (%s)", ErrUnhealthyGPU, g.Index, g.UUID)
	}
	return nil
}

// updateCheckpoint applies f to a copy of the checkpoint, writes it
// atomically and, only when that succeeded, makes it current.
func (d *Driver) updateCheckpoint(f func(*Checkpoint)) error {
	d.ckMu.Lock()
	defer d.ckMu.Unlock()
	ck := d.Checkpoint()
	f(&ck)
	sortClaims(ck.Claims)
	if err := WriteCheckpoint(d.CheckpointPath(), ck); err != nil {
		return fmt.Errorf("driver: write checkpoint: %w", err)
	}
	d.mu.Lock()
	d.ck = ck
	d.mu.Unlock()
	return nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: for each
// claim it destroys exactly the claim's instances (never one with
// processes, never one another claim names), then removes its CDI spec
// and its checkpoint entry. It works from the checkpoint when the claim
// is gone from the API, and is idempotent: a claim with nothing left
// succeeds. A claim whose instances could not all be released (in use,
// or the listing does not authorise destruction) gets an error and keeps
// its checkpoint entry; the kubelet retries.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.unprepare(ctx, string(c.UID))
		if err != nil {
			d.log.Warn("unprepare failed", "claim", c.String(), "err", err)
			err = &ClaimError{Claim: c.String(), Err: err}
		}
		out[c.UID] = err
	}
	d.rebuild()
	return out, nil
}

func (d *Driver) unprepare(ctx context.Context, uid string) error {
	d.mu.Lock()
	ready := d.setUp
	d.mu.Unlock()
	if !ready {
		return ErrNotSetUp
	}
	rep, err := d.mgr.Unprepare(ctx, d.Demand(ctx, nil), uid)
	if err != nil {
		return err
	}
	if n := len(rep.Released) + len(rep.Adopted); n > 0 {
		d.log.Info("unprepared", "claim", uid, "released", len(rep.Released), "vanished", len(rep.Vanished))
	}
	if err := d.cdi.remove(uid); err != nil {
		return err
	}
	if _, ok := d.Checkpoint().Claim(uid); !ok {
		return nil
	}
	return d.updateCheckpoint(func(ck *Checkpoint) {
		ck.Claims = slices.DeleteFunc(ck.Claims, func(c PreparedClaim) bool { return c.UID == uid })
	})
}

// HandleError implements kubeletplugin.DRAPlugin: recoverable background
// errors (ResourceSlice publication) are logged; fatal ones also stop Run.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.log.Warn(msg, "err", err)
		return
	}
	d.log.Error(msg, "err", err)
	select {
	case d.fatal <- fmt.Errorf("driver: %s: %w", msg, err):
	default:
	}
}

// HealthRefresh is how often [Driver.WatchHealthStatus] sends a report
// when nothing changed, well within the kubelet's staleness timeout
// (HealthTimeout).
const (
	HealthRefresh = 10 * time.Second
	HealthTimeout = 45 * time.Second
)

// WatchHealthStatus implements kubeletplugin.DRAPlugin (KEP-4680): it
// sends [Driver.HealthReport] at once, again at every health change and
// every [HealthRefresh], until ctx ends. The kubelet shows the health in
// the status of the pods that use the devices. New devices are left to the
// publication: an unhealthy GPU publishes none.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(HealthRefresh)
	defer tick.Stop()
	for {
		changed := d.healthChanged()
		select {
		case reports <- d.HealthReport():
		case <-ctx.Done():
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// healthChanged returns a channel closed at the next health change.
func (d *Driver) healthChanged() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.healthed == nil {
		d.healthed = make(chan struct{})
	}
	return d.healthed
}

// HealthReport returns the health of every prepared device: Unhealthy when
// its GPU is unhealthy or unmonitored or its MIG device failed, with the
// cause ([realize.HealthState.Why]) in the message; Healthy otherwise.
func (d *Driver) HealthReport() kubeletplugin.DeviceHealthReport {
	ck := d.Checkpoint()
	cat := d.Catalog()
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	var rep kubeletplugin.DeviceHealthReport
	for _, pc := range ck.Claims {
		for _, pd := range pc.Devices {
			dh := kubeletplugin.DeviceHealth{PoolName: d.cfg.Node, DeviceName: pd.Device, Health: kubeletplugin.HealthStatusHealthy,
				LastUpdated: now, HealthCheckTimeout: HealthTimeout}
			var g capability.GPU
			ok := false
			if cat != nil {
				g, ok = cat.GPU(pd.Partition.GPUUUID)
			}
			switch {
			case !ok:
				dh.Health, dh.Message = kubeletplugin.HealthStatusUnknown, "GPU "+pd.Partition.GPUUUID+" is not on the node"
			case !d.health.GPUHealthy(g.Index):
				why, _ := d.health.Why(g.Index)
				dh.Health, dh.Message = kubeletplugin.HealthStatusUnhealthy, why.String()
			case !d.health.MIGHealthy(g.Index, pd.Runtime.GPUInstanceID, pd.Runtime.ComputeInstanceID):
				dh.Health = kubeletplugin.HealthStatusUnhealthy
				dh.Message = fmt.Sprintf("GPU %d MIG %d/%d unhealthy", g.Index, pd.Runtime.GPUInstanceID, pd.Runtime.ComputeInstanceID)
				for _, e := range d.health.UnhealthyMIG(g.Index) {
					if e.GI == pd.Runtime.GPUInstanceID && e.CI == pd.Runtime.ComputeInstanceID {
						dh.Message = e.String()
					}
				}
			}
			rep.Devices = append(rep.Devices, dh)
		}
	}
	return rep
}

// Run sets the driver up, starts the kubelet plugin (registration and DRA
// sockets), publishes the node's ResourceSlices and keeps them current,
// and maintains the hardware every MaintainInterval, until ctx is done
// or the plugin reports a fatal error. Every goroutine it starts has
// stopped when it returns.
func (d *Driver) Run(ctx context.Context) error {
	if d.cfg.Client == nil {
		return fmt.Errorf("%w: Run needs an API client", ErrConfig)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if d.claimSource() == nil {
		src := newInformerSource(d.cfg.Client, d.signal)
		d.mu.Lock()
		d.source = src
		d.mu.Unlock()
		src.run(ctx, &wg)
		for {
			if _, ok := src.Claims(); ok {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("driver: claim informer never synced: %w", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if err := d.Setup(ctx); err != nil {
		if errors.Is(err, ErrCheckpoint) || !d.isSetUp() {
			return err
		}
		d.log.Warn("first maintenance pass failed; retrying", "err", err)
	}
	if hw, ok := d.cfg.Hardware.(realize.HealthWatcher); ok {
		wg.Go(func() { d.watchHealth(ctx, hw) })
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(d.cfg.Client),
		kubeletplugin.NodeName(d.cfg.Node),
		kubeletplugin.PluginDataDirectoryPath(d.cfg.DataDir),
		kubeletplugin.HealthService(true), // WatchHealthStatus
	}
	if d.cfg.RegistrarDir != "" {
		opts = append(opts, kubeletplugin.RegistrarDirectoryPath(d.cfg.RegistrarDir))
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		return fmt.Errorf("driver: start kubelet plugin: %w", err)
	}
	defer helper.Stop()
	d.pubMu.Lock()
	d.publisher = helper.PublishResources
	d.pubMu.Unlock()
	d.signal()

	tick := time.NewTicker(d.cfg.MaintainInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.fatal:
			return err
		case <-d.changed:
			d.rebuildAndPublish(ctx)
		case <-tick.C:
			if _, err := d.Maintain(ctx); err != nil {
				d.log.Warn("maintenance pass", "err", err)
			}
		}
	}
}

func (d *Driver) claimSource() ClaimSource {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.source
}

func (d *Driver) isSetUp() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.setUp
}

// signal asks Run to rebuild and republish.
func (d *Driver) signal() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// rebuildAndPublish is Run's reaction to a change: the order of devices
// depends on the taken slots, so a new allocation reorders its GPU.
func (d *Driver) rebuildAndPublish(ctx context.Context) {
	// build, not rebuild: no signal of its own, so a quiet system stays
	// quiet, while a change signalled meanwhile still gets its turn.
	d.build()
	d.pubMu.Lock()
	pub := d.publisher
	d.pubMu.Unlock()
	cat := d.Catalog()
	if pub == nil || cat == nil {
		return
	}
	if err := pub(ctx, d.Resources()); err != nil {
		d.log.Error("publish ResourceSlices", "err", err)
	}
}

// watchHealth applies the backend's health events until ctx is done; a
// GPU-level transition republishes. It follows a [realize.HealthMonitor]:
// a watch that cannot be opened makes every GPU unmonitored (published
// with no devices) and is retried with backoff, and a failed wait is
// logged while the watch keeps running, so that what the backend reports
// next (every GPU unhealthy after a lost GPU, then the recoveries) is
// applied.
func (d *Driver) watchHealth(ctx context.Context, hw realize.HealthWatcher) {
	d.mu.Lock()
	gpus := make([]int, 0, len(d.gpus))
	for _, g := range d.gpus {
		gpus = append(gpus, g.Index)
	}
	d.mu.Unlock()
	w := realize.NewHealthMonitor(hw, gpus, realize.HealthMonitorOptions{Checks: d.cfg.HealthChecks, Logger: d.log})
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		switch {
		case ctx.Err() != nil || errors.Is(err, realize.ErrWatchClosed):
			return
		case err != nil:
			d.log.Warn("waiting for GPU health events; the watch goes on", "err", err)
			continue
		}
		d.ApplyHealth(ev)
	}
}

// ApplyHealth records a health event. Any change wakes
// [Driver.WatchHealthStatus] and rebuilds the publication: an unhealthy
// GPU publishes no free devices, and prepared devices hit by a failure
// are tainted ([Driver.Resources]).
func (d *Driver) ApplyHealth(ev realize.HealthEvent) {
	d.mu.Lock()
	changed := d.health.Apply(ev)
	if changed && d.healthed != nil {
		close(d.healthed)
		d.healthed = nil
	}
	after := d.health.GPUHealthy(ev.GPU)
	d.mu.Unlock()
	if changed {
		d.log.Info("GPU health changed", "gpu", ev.GPU, "gpu_healthy", after, "event", ev.String())
		d.rebuild()
	}
}

// TaintKey is the key of the device taints (KEP-5055) the driver puts on
// the prepared devices of a failed GPU or MIG device; the value names the
// cause, such as "xid-79".
const TaintKey = DriverName + "/unhealthy"

// Resources returns the publication Run hands to the kubelet plugin: the
// catalog's ([Catalog.Resources]) with the prepared devices that a health
// failure hits tainted. A device on an unhealthy or unmonitored GPU (whose
// free devices the catalog withholds) is published again, tainted, in a
// slice of its own, so that the taint reaches the pods using it; a failed
// MIG device on a healthy GPU is tainted where it is published. The effect
// is NoExecute when the GPU is lost (Xid 79, the driver reports it
// unavailable or needing a reset, or an NVML wait failed: the kube
// controller then evicts the pods that do not tolerate it), NoSchedule
// otherwise. Before Setup it is empty.
func (d *Driver) Resources() resourceslice.DriverResources {
	cat := d.Catalog()
	if cat == nil {
		return resourceslice.DriverResources{}
	}
	res := cat.Resources()
	ck := d.Checkpoint()
	taints := map[string]resourceapi.DeviceTaint{}
	var extra []PublishedDevice
	d.mu.Lock()
	for _, pc := range ck.Claims {
		for _, pd := range pc.Devices {
			if _, seen := taints[pd.Device]; seen {
				continue
			}
			_, g, err := cat.Lookup(pd.Device)
			if err != nil {
				continue // not publishable (left the allowlist): nothing to taint
			}
			t, bad := d.taint(g.Index, pd.Runtime)
			if !bad {
				continue
			}
			taints[pd.Device] = t
			if !d.health.GPUHealthy(g.Index) {
				extra = append(extra, PublishedDevice{Name: pd.Device, Partition: pd.Partition, GPU: g.Index})
			}
		}
	}
	d.mu.Unlock()
	if len(taints) == 0 {
		return res
	}
	pool := res.Pools[d.cfg.Node]
	for si := range pool.Slices {
		for di := range pool.Slices[si].Devices {
			dev := &pool.Slices[si].Devices[di]
			if t, ok := taints[dev.Name]; ok {
				dev.Taints = append(dev.Taints, t)
			}
		}
	}
	slices.SortFunc(extra, func(a, b PublishedDevice) int { return strings.Compare(a.Name, b.Name) })
	for i, pd := range extra {
		if i%resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures == 0 {
			pool.Slices = append(pool.Slices, resourceslice.Slice{})
		}
		dev := device(cat.gpus[cat.byUUID[pd.Partition.GPUUUID]], pd)
		dev.Taints = []resourceapi.DeviceTaint{taints[pd.Name]}
		s := &pool.Slices[len(pool.Slices)-1]
		s.Devices = append(s.Devices, dev)
	}
	res.Pools[d.cfg.Node] = pool
	return res
}

// taint returns the taint of a prepared device with runtime identity rt on
// the GPU, and false when neither the GPU nor the MIG device is unhealthy.
// The caller holds d.mu.
func (d *Driver) taint(gpu int, rt reservation.RuntimeIdentity) (resourceapi.DeviceTaint, bool) {
	why, bad := d.health.Why(gpu)
	if !bad {
		if d.health.MIGHealthy(gpu, rt.GPUInstanceID, rt.ComputeInstanceID) {
			return resourceapi.DeviceTaint{}, false
		}
		for _, e := range d.health.UnhealthyMIG(gpu) {
			if e.GI == rt.GPUInstanceID && e.CI == rt.ComputeInstanceID {
				why = e
			}
		}
	}
	t := resourceapi.DeviceTaint{Key: TaintKey, Value: why.Cause.String(), Effect: resourceapi.DeviceTaintEffectNoSchedule}
	if why.Cause == realize.CauseXid {
		t.Value = fmt.Sprintf("xid-%d", why.Xid)
	}
	lost := why.Cause == realize.CauseUnavailable || why.Cause == realize.CauseWatchFailed || why.Cause == realize.CauseXid && why.Xid == 79
	if lost && why.WholeGPU() {
		t.Effect = resourceapi.DeviceTaintEffectNoExecute
	}
	return t, true
}
