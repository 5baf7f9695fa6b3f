package dradriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/internal/leaf/bootid"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
)

// ErrConfig reports a [Config] the driver cannot run with.
var ErrConfig = errors.New("dradriver: invalid configuration")

// ErrNotSetUp: a DRA call arrived before [Driver.Setup] finished.
var ErrNotSetUp = errors.New("dradriver: not set up")

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
	// CDIGenerator describes the devices in the claims' CDI specs; when
	// set, DeviceNodes is not used. With real GPUs use package
	// nvmlhal/nvcdigen (NVIDIA's library: nodes, libraries, hooks), with
	// fakehal [NewFakeCDI]; nil leaves the specs to DeviceNodes.
	CDIGenerator CDIGenerator
	// BootID returns the node's boot ID; nil reads
	// /proc/sys/kernel/random/boot_id. The checkpoint records it, so a
	// reboot (which no MIG instance or container survives) is told apart
	// from a restart of the driver.
	BootID func() (string, error)
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
}

// ErrBootID: the node's boot ID could not be read or is empty.
var ErrBootID = errors.New("dradriver: cannot read the node's boot ID")

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
	boot, err := bootid.Read(d.cfg.BootID)
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

func (d *Driver) claims() ([]*resourceapi.ResourceClaim, bool) {
	d.mu.Lock()
	src := d.source
	d.mu.Unlock()
	if src == nil {
		return nil, false
	}
	return src.Claims()
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
		if err := d.startInformer(ctx, &wg); err != nil {
			return err
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
	helper, err := d.startPlugin(ctx)
	if err != nil {
		return err
	}
	defer helper.Stop()
	d.pubMu.Lock()
	d.publisher = helper.PublishResources
	d.pubMu.Unlock()
	d.signal()
	return d.serve(ctx)
}

// startInformer makes a claim informer on the API client the claim
// source and waits until it has synced; its goroutines join wg and end
// with ctx.
func (d *Driver) startInformer(ctx context.Context, wg *sync.WaitGroup) error {
	src := newInformerSource(d.cfg.Client, d.signal)
	d.mu.Lock()
	d.source = src
	d.mu.Unlock()
	src.run(ctx, wg)
	for {
		if _, ok := src.Claims(); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dradriver: claim informer never synced: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startPlugin starts the kubelet plugin: registration, the DRA service
// and the health service ([Driver.WatchHealthStatus]).
func (d *Driver) startPlugin(ctx context.Context) (*kubeletplugin.Helper, error) {
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
		return nil, fmt.Errorf("dradriver: start kubelet plugin: %w", err)
	}
	return helper, nil
}

// serve republishes on every change and maintains the hardware every
// MaintainInterval until ctx is done (nil) or the plugin reports a fatal
// error.
func (d *Driver) serve(ctx context.Context) error {
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
