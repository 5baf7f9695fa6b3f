package dradriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// ErrConfig reports a [Config] the driver cannot run with.
var ErrConfig = errors.New("dradriver: invalid configuration")

// ErrNotSetUp: a DRA call arrived before [Driver.Setup] finished.
var ErrNotSetUp = errors.New("dradriver: not set up")

// ErrNotAllocated: the claim handed to PrepareResourceClaims has no device
// of this driver in this node's pool.
var ErrNotAllocated = errors.New("dradriver: claim has no device allocated in this node's pool")

// ErrUnhealthyGPU: a claim's device would need a new MIG instance on a GPU
// whose health watch reported it unhealthy. Nothing is created; the
// kubelet retries. The GPU publishes no devices while it is unhealthy, so
// the scheduler places nothing new there.
var ErrUnhealthyGPU = errors.New("dradriver: GPU is unhealthy")

// ErrDeviceHeld: a claim's device overlaps a device that another
// checkpointed claim still holds (it was not unprepared yet). Nothing is
// created; the kubelet retries, and the claim is prepared once the kubelet
// has unprepared the other. The control plane can hand a device to a new
// claim before the node has released it (a force-deleted pod whose
// container still runs, kubernetes/kubernetes#141471): the driver is the
// last line of defence against two workloads on one device.
var ErrDeviceHeld = errors.New("dradriver: device is still held by another claim")

// DeviceHeldError names the device [ErrDeviceHeld] is about.
type DeviceHeldError struct {
	Device string // the refused claim's device
	Claim  string // UID of the checkpointed claim that holds it
	Held   string // that claim's overlapping device
}

func (e *DeviceHeldError) Error() string {
	return fmt.Sprintf("%v: %s overlaps %s of claim %s", ErrDeviceHeld, e.Device, e.Held, e.Claim)
}

// Unwrap returns [ErrDeviceHeld].
func (e *DeviceHeldError) Unwrap() error { return ErrDeviceHeld }

// ErrReallocated: the claim is checkpointed as prepared with other devices
// than its allocation now names. It was deallocated and allocated again
// under the same UID before the kubelet unprepared its earlier
// preparation, whose container may still run. Nothing is created or
// destroyed; the kubelet retries, and the claim is prepared afresh once
// the earlier preparation is unprepared.
var ErrReallocated = errors.New("dradriver: claim re-allocated before its earlier preparation was unprepared")

// ClaimError names the claim and device a preparation failed on.
type ClaimError struct {
	Claim  string // namespace/name (uid)
	Device string // DRA device name, or "" for the whole claim
	Err    error
}

func (e *ClaimError) Error() string {
	msg := "dradriver: claim " + e.Claim
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
	// DeviceNodes finds the device nodes of MIG devices for the CDI specs
	// (see [NodeSource]); nil injects none, leaving access to a runtime
	// that acts on NVIDIA_VISIBLE_DEVICES. With real GPUs use
	// [ProcNodes].
	DeviceNodes NodeSource
	// BootID returns the node's boot ID; nil reads
	// /proc/sys/kernel/random/boot_id. The checkpoint records it, so a
	// reboot (which no MIG instance or container survives) is told apart
	// from a restart of the driver.
	BootID func() (string, error)
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
}

// bootIDFile is where Linux exposes the boot ID, a random UUID per boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// ErrBootID: the node's boot ID could not be read or is empty.
var ErrBootID = errors.New("dradriver: cannot read the node's boot ID")

func readBootID() (string, error) {
	data, err := os.ReadFile(bootIDFile)
	if err != nil {
		return "", err
	}
	return string(data), nil
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
	gpus      []capability.GPU // allowlisted tables
	full      []capability.GPU // full tables
	health    realize.HealthState
	healthed  chan struct{} // closed and replaced when health changes (WatchHealthStatus)
	// ck is the current checkpoint. It is replaced, never modified in
	// place, and shares no memory with anything else (updateCheckpoint
	// copies on write), so a reader may use it after unlocking mu.
	ck  Checkpoint
	cat *Catalog

	// ckMu serialises checkpoint updates (read-modify-write of ck and
	// the file).
	ckMu sync.Mutex
	// opMu serialises the claim operations (prepare, unprepare, the
	// cleanup of stale PrepareStarted claims), each a sequence of
	// checkpoint and hardware steps.
	opMu sync.Mutex

	// changed is signalled when the publication may have changed.
	changed chan struct{}
	// publisher receives publications once Run has started the plugin.
	pubMu     sync.Mutex
	publisher func(context.Context, resourceslice.DriverResources) error
	// fatal receives HandleError's fatal errors for Run.
	fatal chan error
	// events records GPU health Events on the node once Run started it
	// (nil before: Setup and the DRA methods alone record none).
	events  *kube.Events
	nodeRef *kube.NodeReference
}

// EventSource is the component name of the driver's Events: Run records
// one on the node for each GPU or MIG device health change, with package
// kube's reasons (kube.ReasonGPUUnhealthy and the others).
const EventSource = "dynmig-dra-driver"

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
// claims could destroy their instances) and the node's boot ID, discovers
// the GPUs, builds the catalog, and runs one maintenance pass, which
// adopts the instances of prepared claims after a restart. A checkpoint
// written under another boot ID describes a previous boot, which no MIG
// instance and no container survived: its claims are dropped (with their
// CDI specs) and the checkpoint starts afresh under the current boot ID;
// one without a boot ID (version 1) takes the current one. Setup returns
// the pass's error, if any, after setting up: adoption is retried by later
// passes.
func (d *Driver) Setup(ctx context.Context) error {
	ck, err := ReadCheckpoint(d.CheckpointPath())
	if err != nil {
		return err
	}
	readBoot := d.cfg.BootID
	if readBoot == nil {
		readBoot = readBootID
	}
	boot, err := readBoot()
	boot = strings.TrimSpace(boot)
	if err == nil && boot == "" {
		err = errors.New("empty boot ID")
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBootID, err)
	}
	if ck.BootID != "" && ck.BootID != boot {
		d.log.Info("node rebooted since the checkpoint was written: dropping its claims", "checkpoint_boot_id", ck.BootID,
			"boot_id", boot, "claims", len(ck.Claims))
		for _, pc := range ck.Claims {
			if err := d.cdi.remove(pc.UID); err != nil {
				d.log.Warn("remove CDI spec of a claim from a previous boot", "claim", pc.UID, "err", err)
			}
		}
		ck = Checkpoint{}
	}
	ck.BootID = boot
	sortClaims(ck.Claims)
	if err := WriteCheckpoint(d.CheckpointPath(), ck); err != nil {
		return fmt.Errorf("dradriver: write checkpoint: %w", err)
	}
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
		return fmt.Errorf("dradriver: discovery: %w", err)
	}
	for _, f := range report.Findings {
		d.log.Info("discovery finding", "finding", f.String())
	}
	full, err := fullTables(ctx, d.cfg.Hardware)
	if err != nil {
		return fmt.Errorf("dradriver: discovery: %w", err)
	}
	d.mu.Lock()
	d.gpus, d.full = gpus, full
	d.mu.Unlock()
	d.rebuild()
	return nil
}

// fullTables reads the full profile table of every GPU in MIG mode, as
// NVML reports it, without the allowlist: the counters are sized from it
// (capacity comes from the hardware, not from policy).
func fullTables(ctx context.Context, hw realize.Realizer) ([]capability.GPU, error) {
	devs, err := hw.Devices(ctx)
	if err != nil {
		return nil, err
	}
	var out []capability.GPU
	for _, dev := range devs {
		if dev.MIGMode != capability.MIGEnabled {
			continue
		}
		infos, err := hw.GIProfiles(ctx, dev.Index)
		if err != nil {
			return nil, &capability.HardwareError{Op: "GIProfiles", GPU: dev.Index, Err: err}
		}
		g, _ := capability.GPUFromDevice(dev, infos) // unusable profiles are Discover's findings
		out = append(out, g)
	}
	return out, nil
}

// SetAllowlist changes the profile policy, discovers again and
// republishes. Claims already allocated to profiles the new policy does
// not allow are withheld (respected, never realized) from then on, unless
// already prepared; their devices stay published, retained, until
// released (see the package documentation).
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
	ck, full := d.ck, d.full
	d.mu.Unlock()
	// Used and Retained decode the allocations against the same GPUs and
	// policy; decoding does not depend on the order, so an unordered
	// catalog serves.
	dec, err := NewCatalogWith(d.cfg.Node, gpus, CatalogOptions{Full: full})
	if err != nil {
		d.log.Error("catalog", "err", err)
		return
	}
	cat, err := NewCatalogWith(d.cfg.Node, gpus, CatalogOptions{Used: dec.Used(claims, ck), Full: full, Retain: dec.Retained(claims, ck)})
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
	out := Checkpoint{BootID: ck.BootID, Claims: slices.Clone(ck.Claims)}
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
// checkpoint ([Catalog.Demand]): every checkpointed claim holds its
// checkpointed devices until its unprepare, whatever the listing or the
// API server says of it.
func (d *Driver) Demand() realize.Demand {
	claims, complete := d.claims()
	d.mu.Lock()
	cat, ck := d.cat, d.ck
	d.mu.Unlock()
	if cat == nil {
		return realize.Demand{}
	}
	return cat.Demand(claims, complete, ck)
}

// unprepareDemand is the demand for unpreparing the claim uid: uid's
// holder is its checkpointed one alone (an unprepare depends only on the
// claim's own checkpoint and the hardware), or none when uid is not
// checkpointed, so that nothing is taken over for it by placement.
func (d *Driver) unprepareDemand(uid string) realize.Demand {
	dem := d.Demand()
	d.mu.Lock()
	_, checkpointed := d.ck.Claim(uid)
	d.mu.Unlock()
	if !checkpointed {
		dem.Holders = slices.DeleteFunc(dem.Holders, func(h realize.Holder) bool { return h.UID == uid })
	}
	return dem
}

// Maintain runs one maintenance pass: it unprepares the stale
// PrepareStarted claims (below), then adopts until settled, reconciles
// and collects leaks when due against the current listing and checkpoint.
// No checkpointed claim's instance is destroyed by it: only the claim's
// unprepare does that. Run calls it every MaintainInterval.
//
// A PrepareStarted claim was never handed to a container, so the kubelet
// may never unprepare it (its pod was deleted while the preparation kept
// failing). With Config.Client, such a claim that a read from the API
// server confirms gone (not found, or its name now belongs to another UID)
// is unprepared by the driver itself.
func (d *Driver) Maintain(ctx context.Context) (realize.MaintainReport, error) {
	d.cleanStale(ctx)
	// The demand is read between claim operations, so that it holds every
	// claim whose preparation began; one that begins later creates
	// instances that realize's AbsentPodGrace protects from this pass.
	d.opMu.Lock()
	dem := d.Demand()
	d.opMu.Unlock()
	rep, err := d.mgr.MaintainDemand(ctx, dem)
	if rep.Adopt != nil {
		d.log.Info("adoption", "authorized", rep.Adopt.Authorized, "settled", rep.Settled, "adopted", len(rep.Adopt.Adopted),
			"pending", len(rep.Adopt.Pending), "rejected", len(rep.Adopt.Rejected), "leaks", len(rep.Adopt.Leaks), "err", err)
	}
	if len(rep.Reconcile.Released) > 0 || !rep.Reconcile.Authorized {
		d.log.Info("reconcile", "authorized", rep.Reconcile.Authorized, "released", len(rep.Reconcile.Released), "reasons", len(rep.Reconcile.Reasons))
	}
	return rep, err
}

// cleanStale unprepares the PrepareStarted claims the API server confirms
// gone; see [Driver.Maintain].
func (d *Driver) cleanStale(ctx context.Context) {
	if d.cfg.Client == nil || !d.isSetUp() {
		return
	}
	for _, pc := range d.Checkpoint().Claims {
		if pc.State != PrepareStarted || pc.Name == "" {
			continue
		}
		claim, err := d.cfg.Client.ResourceV1().ResourceClaims(pc.Namespace).Get(ctx, pc.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			d.log.Warn("stale claim check", "claim", pc.UID, "err", err)
			continue
		case string(claim.UID) == pc.UID:
			continue
		}
		if err := d.unprepareIf(ctx, pc.UID, PrepareStarted); err != nil {
			d.log.Warn("unprepare stale claim", "claim", pc.UID, "err", err)
		} else {
			d.log.Info("unprepared stale claim the kubelet never received", "claim", pc.Namespace+"/"+pc.Name, "uid", pc.UID)
		}
	}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: for each claim
// it realizes exactly the allocated devices of this node's pool through
// the realize.Manager, in two checkpointed phases: the claim is recorded
// as PrepareStarted, with its devices, before anything is created, and as
// PrepareCompleted, with the runtime identities, once its instances exist
// and its CDI spec is written. It returns one CDI device per device. A
// claim already PrepareCompleted with the same devices gets the same MIG
// devices again (idempotent); one PrepareCompleted with other devices
// fails with [ErrReallocated]; one left PrepareStarted with other devices
// is first rolled back (it was never handed to a container). A device
// that overlaps a device another checkpointed claim holds fails the claim
// with a [*DeviceHeldError] before anything is written or created. A
// claim that fails gets its error in its result (wrapped in a
// [*ClaimError]); the kubelet retries it.
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

// sameDevices reports whether the checkpointed claim pc has exactly the
// devices want (indexes, names, admin access), runtime identities aside.
func sameDevices(pc *PreparedClaim, want []PreparedDevice) bool {
	return slices.EqualFunc(pc.Devices, want, func(a, b PreparedDevice) bool {
		return a.Request == b.Request && a.Device == b.Device && a.ContainerIndex == b.ContainerIndex &&
			a.DeviceIndex == b.DeviceIndex && a.AdminAccess == b.AdminAccess
	})
}

func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	ref := claimRef(claim)
	uid := string(claim.UID)
	cat := d.Catalog()
	if cat == nil {
		return nil, &ClaimError{Claim: ref, Err: ErrNotSetUp}
	}
	devs, ok := cat.ClaimDevices(claim)
	if !ok {
		return nil, &ClaimError{Claim: ref, Err: ErrNotAllocated}
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	ck := d.Checkpoint()
	prev, had := ck.Claim(uid)
	want := make([]PreparedDevice, 0, len(devs))
	realized := 0
	for _, cd := range devs {
		var dne *DeviceNameError
		if errors.As(cd.Err, &dne) {
			return nil, &ClaimError{Claim: ref, Device: cd.Device, Err: cd.Err}
		}
		want = append(want, PreparedDevice{Request: cd.Request, Device: cd.Device, ContainerIndex: cd.ContainerIndex,
			DeviceIndex: cd.DeviceIndex, Partition: cd.Partition, AdminAccess: cd.AdminAccess})
		if !cd.AdminAccess {
			realized++
		}
	}
	completed := had && prev.State == PrepareCompleted
	if !completed || !sameDevices(prev, want) {
		// A prepared claim is handed its devices again even when the
		// allowlist no longer publishes them; nothing new is.
		for _, cd := range devs {
			if cd.Err != nil {
				return nil, &ClaimError{Claim: ref, Device: cd.Device, Err: cd.Err}
			}
		}
	}
	switch {
	case completed && !sameDevices(prev, want):
		return nil, &ClaimError{Claim: ref, Err: ErrReallocated}
	case had && !completed && !sameDevices(prev, want):
		// Never handed to a container: roll the earlier attempt back.
		if _, err := d.mgr.Unprepare(ctx, d.unprepareDemand(uid), uid); err != nil {
			return nil, &ClaimError{Claim: ref, Err: err}
		}
	}
	for _, cd := range devs {
		if cd.AdminAccess {
			continue
		}
		if pc, pd, held := ck.Holds(cd.Partition, uid); held {
			return nil, &ClaimError{Claim: ref, Device: cd.Device, Err: &DeviceHeldError{Device: cd.Device, Claim: pc.UID, Held: pd.Device}}
		}
		if !completed {
			if err := d.checkHealth(cd); err != nil {
				return nil, &ClaimError{Claim: ref, Device: cd.Device, Err: err}
			}
		}
	}
	if !completed {
		started := PreparedClaim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: PrepareStarted, Devices: want}
		if err := d.putClaim(started); err != nil {
			return nil, &ClaimError{Claim: ref, Err: err}
		}
	}
	byOwner := map[[2]int]reservation.RuntimeIdentity{}
	if realized > 0 {
		got, err := d.mgr.Prepare(ctx, d.Demand(), uid)
		if err != nil {
			// The claim stays PrepareStarted: what this call created is
			// rolled back, and a retry, the kubelet's unprepare or the
			// stale-claim cleanup finishes it.
			return nil, &ClaimError{Claim: ref, Err: err}
		}
		for _, g := range got {
			byOwner[[2]int{g.Entry.ContainerIndex, g.Entry.DeviceIndex}] = g.Runtime
		}
	}
	pc := PreparedClaim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, State: PrepareCompleted, Devices: want}
	cdiDevs := make([]CDIDevice, 0, len(devs))
	for i := range pc.Devices {
		pd := &pc.Devices[i]
		cdev := CDIDevice{Device: pd.Device, Request: pd.Request, GPUUUID: pd.Partition.GPUUUID}
		if !pd.AdminAccess {
			rt, ok := byOwner[[2]int{pd.ContainerIndex, pd.DeviceIndex}]
			if !ok {
				return nil, &ClaimError{Claim: ref, Device: pd.Device, Err: fmt.Errorf("dradriver: the manager returned no instance for it")}
			}
			pd.Runtime = rt
			cdev.MIGUUID = rt.MIGUUID
		}
		if src := d.cfg.DeviceNodes; src != nil {
			var err error
			if pd.AdminAccess {
				cdev.Nodes, err = src.GPUNodes(pd.Partition.GPUUUID)
			} else {
				cdev.Nodes, err = src.MIGNodes(pd.Partition.GPUUUID, pd.Runtime.GPUInstanceID, pd.Runtime.ComputeInstanceID)
			}
			if err != nil {
				// The instances stay: the kubelet retries.
				return nil, &ClaimError{Claim: ref, Device: pd.Device, Err: err}
			}
		}
		cdiDevs = append(cdiDevs, cdev)
	}
	var common []DeviceNode
	if src := d.cfg.DeviceNodes; src != nil {
		var err error
		if common, err = src.ControlNodes(); err != nil {
			return nil, &ClaimError{Claim: ref, Err: err}
		}
	}
	ids, err := d.cdi.write(pc.UID, cdiDevs, common)
	if err != nil {
		return nil, &ClaimError{Claim: ref, Err: err}
	}
	for i := range pc.Devices {
		pc.Devices[i].CDIDevice = ids[i]
	}
	if err := d.putClaim(pc); err != nil {
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

// putClaim replaces (or adds) the checkpointed claim with pc's UID.
func (d *Driver) putClaim(pc PreparedClaim) error {
	return d.updateCheckpoint(func(ck *Checkpoint) {
		ck.Claims = slices.DeleteFunc(ck.Claims, func(c PreparedClaim) bool { return c.UID == pc.UID })
		ck.Claims = append(ck.Claims, pc)
	})
}

// checkHealth refuses a device that would need a new instance on an
// unhealthy GPU.
func (d *Driver) checkHealth(cd ClaimDevice) error {
	cat := d.Catalog()
	g, ok := cat.GPU(cd.Partition.GPUUUID)
	if ok && g.Unhealthy {
		return fmt.Errorf("%w: GPU %d (%s)", ErrUnhealthyGPU, g.Index, g.UUID)
	}
	return nil
}

// updateCheckpoint applies f to a copy of the checkpoint, writes it
// atomically and, only when that succeeded, makes it current. What f adds
// is copied too: a claim being prepared keeps writing its own devices
// (their runtime identities) while builds read the current checkpoint
// without a lock.
func (d *Driver) updateCheckpoint(f func(*Checkpoint)) error {
	d.ckMu.Lock()
	defer d.ckMu.Unlock()
	ck := d.Checkpoint()
	f(&ck)
	ck = cloneCheckpoint(ck)
	sortClaims(ck.Claims)
	if err := WriteCheckpoint(d.CheckpointPath(), ck); err != nil {
		return fmt.Errorf("dradriver: write checkpoint: %w", err)
	}
	d.mu.Lock()
	d.ck = ck
	d.mu.Unlock()
	return nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: for each
// claim it destroys exactly the claim's checkpointed instances (never one
// with processes, never one another claim names), then removes its CDI
// spec and its checkpoint entry. It depends only on the claim's own
// checkpoint entry and the hardware: neither the claim listing nor other
// claims hold it up. It works when the claim is gone from the API, and is
// idempotent: a claim with nothing left succeeds. A claim whose instances
// could not all be released (in use) gets an error and keeps its
// checkpoint entry; the kubelet retries.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.unprepareIf(ctx, string(c.UID), "")
		if err != nil {
			d.log.Warn("unprepare failed", "claim", c.String(), "err", err)
			err = &ClaimError{Claim: c.String(), Err: err}
		}
		out[c.UID] = err
	}
	d.rebuild()
	return out, nil
}

// unprepareIf unprepares the claim uid; with a non-empty state, only
// while it is checkpointed in that state.
func (d *Driver) unprepareIf(ctx context.Context, uid string, state ClaimState) error {
	if !d.isSetUp() {
		return ErrNotSetUp
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	if state != "" {
		if pc, ok := d.Checkpoint().Claim(uid); !ok || pc.State != state {
			return nil
		}
	}
	rep, err := d.mgr.Unprepare(ctx, d.unprepareDemand(uid), uid)
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
	case d.fatal <- fmt.Errorf("dradriver: %s: %w", msg, err):
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
				return fmt.Errorf("dradriver: claim informer never synced: %w", ctx.Err())
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
	events := kube.NewEvents(d.cfg.Client, EventSource)
	wg.Go(events.Start(ctx)) // ends with ctx
	d.mu.Lock()
	d.events, d.nodeRef = events, kube.NewNodeReference(d.cfg.Client, d.cfg.Node, d.log)
	d.mu.Unlock()
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
		return fmt.Errorf("dradriver: start kubelet plugin: %w", err)
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
		if d.applyHealth(ev) {
			d.recordHealthEvent(ctx, ev)
		}
	}
}

// ApplyHealth records a health event. Any change wakes
// [Driver.WatchHealthStatus] and rebuilds the publication: an unhealthy
// GPU publishes no free devices, and prepared devices hit by a failure
// are tainted ([Driver.Resources]).
func (d *Driver) ApplyHealth(ev realize.HealthEvent) { d.applyHealth(ev) }

// applyHealth is ApplyHealth; it reports whether the event changed
// anything.
func (d *Driver) applyHealth(ev realize.HealthEvent) bool {
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
	return changed
}

// recordHealthEvent records an Event on the node for one health
// transition the watch applied. Failures are logged by client-go: an Event
// is information, never a reason to stop.
func (d *Driver) recordHealthEvent(ctx context.Context, ev realize.HealthEvent) {
	d.mu.Lock()
	events, ref := d.events, d.nodeRef
	var uuid string
	for _, g := range d.full {
		if g.Index == ev.GPU {
			uuid = g.UUID
		}
	}
	d.mu.Unlock()
	if events == nil {
		return
	}
	var consequence string
	switch {
	case ev.Cause == realize.CauseUnmonitored:
		consequence = "its health cannot be watched, so it publishes no free devices until it can; prepared devices stay with their claims"
	case !ev.Healthy && ev.WholeGPU():
		consequence = "it publishes no free devices, and its prepared devices are tainted " + TaintKey
	case !ev.Healthy:
		consequence = "its prepared device is tainted " + TaintKey
	}
	kind, reason, note := kube.HealthEventFor(ev, uuid, consequence)
	events.Eventf(ref.Get(ctx), nil, kind, reason, kube.HealthAction, "%s", note)
}

// TaintKey is the key of the device taints (KEP-5055) the driver puts on
// the prepared devices of a failed GPU or MIG device; the value names the
// cause, such as "xid-79".
const TaintKey = DriverName + "/unhealthy"

// Resources returns the publication Run hands to the kubelet plugin: the
// catalog's ([Catalog.Resources]) with the prepared devices that a health
// failure hits tainted, retained ones ([PublishedDevice.Retained])
// included. A device on an unhealthy or unmonitored GPU (whose free
// devices the catalog withholds) is published again, tainted, in a slice
// of its own, so that the taint reaches the pods using it; a failed MIG
// device on a healthy GPU, and a retained device, which the catalog
// publishes whatever its GPU's health, are tainted where they are
// published. The effect
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
			// A retained device (its profile left the allowlist) is
			// published whatever its GPU's health, and gets every taint
			// a published device gets.
			_, g, err := cat.Lookup(pd.Device)
			retained := err != nil && cat.isRetained(pd.Device)
			if err != nil && !retained {
				continue // not published: nothing to taint
			}
			t, bad := d.taint(g.Index, pd.Runtime)
			if !bad {
				continue
			}
			taints[pd.Device] = t
			if !retained && !d.health.GPUHealthy(g.Index) {
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
