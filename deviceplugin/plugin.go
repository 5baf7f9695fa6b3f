package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// VisibleDevicesEnv is the container environment variable the NVIDIA
// container runtime reads; the plugin sets it to the MIG UUIDs.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// ErrNoPendingPod: no pod on the node has a container, not realized yet,
// that requests the number of devices in the Allocate.
var ErrNoPendingPod = errors.New("deviceplugin: no pending MIG pod matches the allocation")

// Config configures a [Plugin].
type Config struct {
	// Node is this node's name; required.
	Node string
	// Client talks to the API server; required.
	Client kubernetes.Interface
	// Hardware is the MIG backend (fakehal or nvmlhal); required.
	Hardware realize.Realizer
	// ResourceName is the extended resource served; "" means
	// "nvidia.com/gpu".
	ResourceName string
	// SchedulerNames are the spec.schedulerName values of the schedulers
	// whose extender writes reservation records; nil means
	// [DefaultSchedulerName]. A record that arrives on the node with such a
	// scheduler's binding wins a conflict with an overlapping one (see
	// kube.NodePodSourceOptions.SchedulerNames).
	SchedulerNames []string
	// SocketDir and SocketName locate the plugin's gRPC socket; ""
	// means v1beta1.DevicePluginPath and "dynmig-mig.sock".
	SocketDir, SocketName string
	// Checkpoint is the path of the plugin's checkpoint (see the package
	// documentation, "Checkpoint"); "" means [CheckpointDir]/[CheckpointFile]
	// under SocketDir. Its directory is created when missing, and the
	// plugin holds its lock from [New] until [Plugin.Run] returns or
	// [Plugin.Close]. A file that cannot be read or trusted, or a
	// directory another plugin process holds ([ErrCheckpointInUse]),
	// makes [New] fail with a [*CheckpointError].
	Checkpoint string
	// BootID returns the node's boot ID, which the checkpoint records
	// (see the package documentation, "Reboots"); nil reads
	// /proc/sys/kernel/random/boot_id. An error fails [New]
	// ([ErrBootID]).
	BootID func() (string, error)
	// KubeletSocket is the kubelet registration socket; "" skips
	// registration (tests drive the plugin's socket directly).
	KubeletSocket string
	// PodResourcesSocket is the kubelet's PodResources API socket
	// ([DefaultPodResourcesSocket] on a real node), used after the fact to
	// check that each realized MIG device went to the container it was
	// realized for ([Plugin.VerifyAssignments], run on every maintenance
	// pass, each bounded by ReconcileInterval); "" skips the check.
	PodResourcesSocket string
	// Allowlist is the profile policy; nil means
	// capability.DefaultAllowlist().
	Allowlist capability.Allowlist
	// AllowMIGManager overrides the MIG Manager ownership refusal.
	AllowMIGManager bool
	// HealthChecks say which of the backend's health events count
	// (realize.ParseHealthChecks reads NVIDIA's DP_DISABLE_HEALTHCHECKS
	// and DP_ENABLE_HEALTHCHECKS); the zero value ignores application
	// Xids only.
	HealthChecks realize.HealthChecks
	// ReconcileInterval is the period of the maintenance pass
	// (realize.Manager.Maintain: adoption until settled, reconcile, leak
	// collection every Manager.LeakInterval); 0 means kube's default.
	ReconcileInterval time.Duration
	// SocketCheckInterval is how often the plugin checks that its socket
	// still exists: a restarting kubelet removes every plugin socket, and
	// the plugin then serves a new one and registers again. 0 means 5 s.
	SocketCheckInterval time.Duration
	// CacheCatchUp bounds how long Allocate waits for the plugin's pod
	// cache to catch up with a pod only a direct listing found (see the
	// package documentation, "Which pod is being admitted?"); 0 means 5 s.
	CacheCatchUp time.Duration
	// Clock drives the reconcile and socket-check timers; nil is the real
	// clock.
	Clock clock.Clock
	// Manager configures the realization manager (its Logger defaults
	// to Logger). Its AbsentPodGrace delays reclaiming an instance whose
	// pod vanished from the listing without first being seen deleting.
	Manager realize.Options
	// DeviceListStrategy says how Allocate hands a container its devices
	// (see the package documentation, "Device lists"); "" means
	// [DeviceListEnvVar].
	DeviceListStrategy DeviceListStrategy
	// CDIDir is where a CDI strategy's specs are written, one per managed
	// MIG instance (see the package documentation, "CDI specs"); ""
	// means [DefaultCDIDir]. Unused by the other strategies.
	CDIDir string
	// CDIGenerator describes the instances in their CDI specs; a CDI
	// strategy needs one ([NewFakeCDI] for fakehal; for real GPUs
	// package nvmlhal/nvcdigen, NVIDIA's library, or [NewProcCDI] for
	// device nodes only), others ignore it.
	CDIGenerator CDIGenerator
	// Logger; nil discards.
	Logger *slog.Logger
}

// Plugin is a kubelet device plugin over a realize.Manager. Create it with
// [New] and run it with [Plugin.Run].
type Plugin struct {
	v1beta1.UnimplementedDevicePluginServer

	cfg       Config
	log       *slog.Logger
	manager   *realize.Manager
	source    *kube.NodePodSource
	runner    *kube.ReconcileRunner
	guard     *kube.OwnershipGuard
	writer    *kube.AnnotationWriter
	publisher *kube.RegistrationPublisher
	events    *kube.Events // the node's GPU health Events (events.go)
	ready     chan struct{}
	serving   atomic.Bool // see Serving

	nodeRef *kube.NodeReference // what the node's Events regard

	mu     sync.Mutex // guards gpus and claims; held for container selection only
	gpus   []capability.GPU
	claims map[target]claim // containers this plugin realized or is realizing

	verify *verifier // what was realized for which device IDs

	record *nodeRecord // the checkpoint

	lockMu sync.Mutex
	lock   *os.File // the checkpoint directory's lock; nil once released

	health healthTracker // GPU health from the backend (health.go)

	cdi *cdiSpecs // the instances' CDI specs; nil without a CDI strategy (cdispec.go)

	lastReconcile atomic.Pointer[realize.ReconcileReport] // see LastReconcile
}

type target struct {
	uid       types.UID
	container int
}

// claim is how far the plugin got with a container it picked.
type claim uint8

const (
	// realizing: an Allocate call is realizing the container now. The
	// claim is kept even when the pod is missing from a lagging cache:
	// without it a concurrent call could pick the same container from a
	// direct listing and hand its instance out twice.
	realizing claim = iota + 1
	// realized: the runtime identity was written; the claim only bridges
	// the time until the cache shows it, and is dropped with the pod.
	realized
	// unrecorded: the runtime identity was written but the checkpoint
	// write failed, so Allocate failed and the kubelet holds no device:
	// the container stays pending for the kubelet's retry, although its
	// record looks realized. A restart forgets this; the container is then
	// refused as any unconfirmed realized record is (select.go).
	unrecorded
)

// DefaultSchedulerName is the scheduler profile deploy/scheduler runs the
// extender with.
const DefaultSchedulerName = "dynmig-scheduler"

// ErrClosed: [Plugin.Run] was called after the plugin was closed or had
// run.
var ErrClosed = errors.New("deviceplugin: plugin closed")

// New checks cfg, takes the checkpoint directory's lock and reads the
// checkpoint, and builds the plugin; it touches neither the API server nor
// the hardware. Run the plugin, or Close it, to release the lock.
func New(cfg Config) (*Plugin, error) {
	switch {
	case cfg.Node == "":
		return nil, errors.New("deviceplugin: Config.Node is required")
	case cfg.Client == nil:
		return nil, errors.New("deviceplugin: Config.Client is required")
	case cfg.Hardware == nil:
		return nil, errors.New("deviceplugin: Config.Hardware is required")
	}
	cfg, log := withDefaults(cfg)
	specs, err := newCDISpecs(&cfg, log)
	if err != nil {
		return nil, err
	}
	boot, err := bootID(cfg.BootID)
	if err != nil {
		return nil, err
	}
	lock, err := openCheckpointDir(cfg.Checkpoint, log)
	if err != nil {
		return nil, err
	}
	record, err := readRecord(cfg.Checkpoint, boot, log)
	if err != nil {
		lock.Close()
		return nil, err
	}
	p := &Plugin{
		cfg:       cfg,
		log:       log,
		manager:   realize.NewManager(cfg.Hardware, cfg.Manager),
		guard:     kube.NewOwnershipGuard(cfg.Client, cfg.Node, kube.OwnershipGuardOptions{Override: cfg.AllowMIGManager, Logger: log}),
		writer:    kube.NewAnnotationWriter(cfg.Client, kube.AnnotationWriterOptions{Logger: log}),
		publisher: kube.NewRegistrationPublisher(cfg.Client, cfg.Node, kube.RegistrationPublisherOptions{Logger: log}),
		events:    kube.NewEvents(cfg.Client, EventSource),
		nodeRef:   kube.NewNodeReference(cfg.Client, cfg.Node, log),
		ready:     make(chan struct{}),
		claims:    map[target]claim{},
		verify:    newVerifier(),
		record:    record,
		lock:      lock,
		cdi:       specs,
	}
	// A deleted or finished pod triggers a reconcile pass at once.
	p.source = kube.NewNodePodSource(cfg.Client, cfg.Node, kube.NodePodSourceOptions{
		Logger: log, OnInactive: func(pod reservation.Pod) { p.runner.PodInactive(pod) },
		Resource: corev1.ResourceName(cfg.ResourceName), Clock: cfg.Clock, SchedulerNames: cfg.SchedulerNames,
		Observations: p.record.observations(), OnObservations: p.record.setObservations,
	})
	p.runner = kube.NewReconcileRunner(snapshotter{p}, kube.ReconcilerFunc(p.reconcile), kube.ReconcileRunnerOptions{
		Interval: cfg.ReconcileInterval, Clock: cfg.Clock, Logger: log,
	})
	return p, nil
}

// withDefaults fills in the zero fields of cfg that have defaults, and
// returns it with its logger.
func withDefaults(cfg Config) (Config, *slog.Logger) {
	if cfg.ResourceName == "" {
		cfg.ResourceName = string(kube.ResourceGPU)
	}
	if cfg.SchedulerNames == nil {
		cfg.SchedulerNames = []string{DefaultSchedulerName}
	}
	if cfg.SocketDir == "" {
		cfg.SocketDir = v1beta1.DevicePluginPath
	}
	if cfg.SocketName == "" {
		cfg.SocketName = "dynmig-mig.sock"
	}
	if cfg.Checkpoint == "" {
		cfg.Checkpoint = filepath.Join(cfg.SocketDir, CheckpointDir, CheckpointFile)
	}
	if cfg.Allowlist == nil {
		cfg.Allowlist = capability.DefaultAllowlist()
	}
	if cfg.CacheCatchUp <= 0 {
		cfg.CacheCatchUp = 5 * time.Second
	}
	if cfg.SocketCheckInterval <= 0 {
		cfg.SocketCheckInterval = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Manager.Logger == nil {
		cfg.Manager.Logger = log
	}
	return cfg, log
}

// newCDISpecs checks cfg's device list strategy and, for a CDI strategy,
// returns the spec keeper of cfg.CDIDir (filling in its default); nil
// otherwise.
func newCDISpecs(cfg *Config, log *slog.Logger) (*cdiSpecs, error) {
	strategy, err := ParseDeviceListStrategy(string(cfg.DeviceListStrategy))
	if err != nil {
		return nil, err
	}
	cfg.DeviceListStrategy = strategy
	if !strategy.CDI() {
		return nil, nil
	}
	if cfg.CDIGenerator == nil {
		return nil, ErrNoCDIGenerator
	}
	if cfg.CDIDir == "" {
		cfg.CDIDir = DefaultCDIDir
	}
	return &cdiSpecs{dir: cfg.CDIDir, gen: cfg.CDIGenerator, log: log}, nil
}

// readRecord reads the checkpoint at path for the node's current boot, and
// writes it back at once when it was written under another boot or
// without one.
func readRecord(path, boot string, log *slog.Logger) (*nodeRecord, error) {
	ckpt, exists, err := ReadCheckpoint(path)
	if err != nil {
		return nil, err
	}
	if !exists {
		log.Warn("no checkpoint: the pods listed at startup are inherited, their records' runtime identities trusted", "path", path)
	}
	r := newNodeRecord(path, ckpt, exists, boot, log)
	if exists && ckpt.BootID != boot {
		if err := r.stamp(); err != nil {
			return nil, &CheckpointError{Path: path, Pod: -1, Device: -1, Err: err}
		}
	}
	return r, nil
}

// Close releases the checkpoint directory's lock, so that another plugin
// process may take over the checkpoint; [Plugin.Run] does so when it
// returns. Call it for a plugin that is never run. It is safe to call more
// than once; a closed plugin cannot run.
func (p *Plugin) Close() error {
	p.lockMu.Lock()
	defer p.lockMu.Unlock()
	if p.lock == nil {
		return nil
	}
	err := p.lock.Close()
	p.lock = nil
	return err
}

// Manager returns the plugin's realization manager, for inspection.
func (p *Plugin) Manager() *realize.Manager { return p.manager }

// SocketPath returns the path of the plugin's gRPC socket.
func (p *Plugin) SocketPath() string { return filepath.Join(p.cfg.SocketDir, p.cfg.SocketName) }

// Ready is closed once the plugin serves its socket and has registered
// with the kubelet for the first time.
func (p *Plugin) Ready() <-chan struct{} { return p.ready }

// Serving reports whether the kubelet can reach the plugin now: it serves
// its socket and is registered. It turns false when a restarting kubelet
// removes the socket, until the plugin serves a new one and the kubelet
// accepts its registration; readiness probes use it.
func (p *Plugin) Serving() bool { return p.serving.Load() }

// Reconciles returns the number of reconcile passes run so far.
func (p *Plugin) Reconciles() uint64 {
	total, _ := p.runner.Passes()
	return total
}

// LastReconcile returns the reconcile report of the latest maintenance
// pass that ran to its end, and false before the first one did. It is
// safe to call concurrently with everything else; the report is a copy.
//
// A report that is not Authorized means the pass's listing paused
// destruction: the pass released and collected nothing, and an Allocate
// whose listing is unauthorised for the same reasons takes over no
// instance the manager does not manage (a *realize.ConflictError). Its
// Reasons say why: a *reservation.PodError names a pod whose record is
// invalid, a *reservation.ConflictError the two pods whose records
// overlap, and reservation.ErrIncompleteSnapshot a listing that was not
// complete. Destruction resumes with the first pass after those pods are
// gone or their records repaired.
func (p *Plugin) LastReconcile() (realize.ReconcileReport, bool) {
	r := p.lastReconcile.Load()
	if r == nil {
		return realize.ReconcileReport{}, false
	}
	out := *r
	out.Reasons = slices.Clone(r.Reasons)
	out.Released = slices.Clone(r.Released)
	out.Kept = slices.Clone(r.Kept)
	out.Vanished = slices.Clone(r.Vanished)
	out.Deferred = slices.Clone(r.Deferred)
	out.Retained = slices.Clone(r.Retained)
	return out, true
}

// Run starts the plugin and blocks until ctx is done: it runs the pod
// source, waits for a complete listing, checks MIG ownership, discovers and
// publishes capability, adopts live instances, starts reconciliation,
// serves the gRPC socket and registers with the kubelet. It returns the
// first startup error, or nil after a clean stop. Every goroutine it starts
// has stopped when it returns, and the checkpoint directory's lock is
// released ([Plugin.Close]): a plugin runs once.
func (p *Plugin) Run(ctx context.Context) error {
	p.lockMu.Lock()
	closed := p.lock == nil
	p.lockMu.Unlock()
	if closed {
		return ErrClosed
	}
	defer p.Close() // after every goroutine, and so every checkpoint write, has stopped
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // runs before wg.Wait

	wg.Go(p.events.Start(ctx))
	wg.Go(func() { _ = p.source.Run(ctx) })
	if !p.source.WaitForSync(ctx) {
		return fmt.Errorf("deviceplugin: pod cache of node %q never synced: %w", p.cfg.Node, ctx.Err())
	}
	if err := p.guard.Check(ctx); err != nil {
		return err
	}
	if err := p.discoverAndPublish(ctx, &wg); err != nil {
		return err
	}
	if err := p.firstPass(ctx); err != nil {
		return err
	}
	wg.Go(func() { _ = p.runner.Run(ctx) })

	p.record.serving()
	srv, err := p.serve(&wg)
	if err != nil {
		return err
	}
	defer func() { srv.Stop() }() // the server current at return
	if p.cfg.KubeletSocket != "" {
		if err := p.register(ctx); err != nil {
			return err
		}
	}
	p.serving.Store(true)
	close(p.ready)
	defer p.serving.Store(false)
	return p.watchSocket(ctx, &wg, &srv)
}

// discoverAndPublish discovers the GPUs, restores their health, publishes
// them and starts watching their health on wg.
func (p *Plugin) discoverAndPublish(ctx context.Context, wg *sync.WaitGroup) error {
	gpus, report, err := capability.Discover(ctx, p.cfg.Hardware, p.cfg.Allowlist)
	if err != nil {
		return fmt.Errorf("deviceplugin: discovery: %w", err)
	}
	for _, f := range report.Findings {
		p.log.Info("discovery finding", "finding", f.String())
	}
	p.mu.Lock()
	p.gpus = gpus
	p.mu.Unlock()
	if err := p.restoreHealth(ctx); err != nil { // before the first publish: a restart keeps failed GPUs out
		return err
	}
	if err := p.publish(ctx); err != nil {
		return err
	}
	if w := p.openHealth(ctx); w != nil {
		wg.Go(func() { p.watchHealth(ctx, w) })
	}
	return nil
}

// firstPass runs the first maintenance pass, which adopts live instances
// before the socket is served; later passes (the runner's) adopt again
// until adoption settles, reconcile and collect leaks.
func (p *Plugin) firstPass(ctx context.Context) error {
	snap := p.snapshot()
	rep, err := p.maintain(ctx, snap)
	if err := p.syncSpecs(ctx); err != nil { // before serving: no instance without its spec
		return err
	}
	if rep.Adopt != nil {
		p.log.Info("adoption", "authorized", rep.Adopt.Authorized, "settled", rep.Settled, "adopted", len(rep.Adopt.Adopted),
			"pending", len(rep.Adopt.Pending), "unverified", len(rep.Adopt.Unverified), "rejected", len(rep.Adopt.Rejected),
			"leaks", len(rep.Adopt.Leaks), "err", err)
	}
	if rep.MIGSwitchedOn() {
		return p.rediscover(ctx)
	}
	return nil
}

// watchSocket serves until ctx is done. When the socket disappears (the
// kubelet restarted and cleared its plugin directory) it serves a new one
// and registers again, retrying registration at every check until the
// kubelet answers.
func (p *Plugin) watchSocket(ctx context.Context, wg *sync.WaitGroup, srv **grpc.Server) error {
	registered := true
	for {
		t := p.cfg.Clock.NewTimer(p.cfg.SocketCheckInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		if _, err := os.Stat(p.SocketPath()); err != nil {
			p.log.Warn("plugin socket gone (kubelet restart?); serving it again", "socket", p.SocketPath(), "err", err)
			p.serving.Store(false)
			(*srv).Stop()
			s, err := p.serve(wg)
			if err != nil {
				return err
			}
			*srv = s
			registered = false
		}
		if !registered && p.cfg.KubeletSocket != "" {
			if err := p.register(ctx); err != nil {
				p.log.Warn("registration with the kubelet failed; retrying", "err", err)
				continue
			}
			p.log.Info("registered with the kubelet again")
		}
		registered = true
		p.serving.Store(true)
	}
}

func (p *Plugin) serve(wg *sync.WaitGroup) (*grpc.Server, error) {
	path := p.SocketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("deviceplugin: remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("deviceplugin: listen: %w", err)
	}
	srv := grpc.NewServer()
	v1beta1.RegisterDevicePluginServer(srv, p)
	wg.Go(func() { _ = srv.Serve(lis) })
	return srv, nil
}

func (p *Plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+p.cfg.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("deviceplugin: dial kubelet: %w", err)
	}
	defer conn.Close()
	_, err = v1beta1.NewRegistrationClient(conn).Register(ctx, &v1beta1.RegisterRequest{
		Version:      v1beta1.Version,
		Endpoint:     p.cfg.SocketName,
		ResourceName: p.cfg.ResourceName,
		Options:      &v1beta1.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("deviceplugin: register with kubelet: %w", err)
	}
	return nil
}

// reconcile is one maintenance pass: ownership check, then the manager's
// Maintain (adoption until settled, reconcile, periodic leak collection),
// then the after-the-fact check of the kubelet's assignments.
func (p *Plugin) reconcile(ctx context.Context, snap reservation.Snapshot) error {
	if err := p.guard.Check(ctx); err != nil {
		return err
	}
	rep, err := p.maintain(ctx, snap)
	if serr := p.syncSpecs(ctx); serr != nil {
		p.log.WarnContext(ctx, "could not reconcile the CDI specs", "err", serr)
	}
	level := slog.LevelDebug
	if len(rep.Reconcile.Released)+len(rep.Reconcile.Kept)+len(rep.Reconcile.Vanished) > 0 || !rep.Reconcile.Authorized || !rep.Settled {
		level = slog.LevelInfo
	}
	p.log.Log(ctx, level, "maintenance", "pods", len(snap.Pods), "complete", snap.Complete, "settled", rep.Settled,
		"reconcile", rep.Reconcile.String(), "leaks_collected", leaksCollected(rep.Leaks), "err", err)
	if rep.MIGSwitchedOn() {
		if rerr := p.rediscover(ctx); rerr != nil {
			p.log.WarnContext(ctx, "could not publish the GPUs MIG mode was switched on for", "err", rerr)
		}
	}
	// A kubelet that does not answer must not hold up later passes.
	bound := p.cfg.ReconcileInterval
	if bound <= 0 {
		bound = kube.DefaultReconcileInterval
	}
	vctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if _, verr := p.VerifyAssignments(vctx); verr != nil {
		p.log.WarnContext(ctx, "could not check the kubelet's device assignments", "err", verr)
	}
	return err
}

// maintain runs the manager's Maintain over snap, keeps its reconcile
// report for LastReconcile and brings the checkpoint's observations up to
// date with snap.
func (p *Plugin) maintain(ctx context.Context, snap reservation.Snapshot) (realize.MaintainReport, error) {
	rep, err := p.manager.Maintain(ctx, snap)
	if ctx.Err() == nil { // a pass cut short may not have reconciled
		p.lastReconcile.Store(&rep.Reconcile)
	}
	p.record.sync(p.manager.Managed, snap)
	return rep, err
}

func leaksCollected(l *realize.LeakReport) int {
	if l == nil {
		return 0
	}
	return len(l.Collected)
}

// GetDevicePluginOptions reports that the plugin needs no PreStartContainer
// and offers no preferred allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *v1beta1.Empty) (*v1beta1.DevicePluginOptions, error) {
	return &v1beta1.DevicePluginOptions{}, nil
}

// ListAndWatch sends the advertised devices, and again whenever a GPU's or
// MIG device's health changes, until the kubelet or the plugin closes the
// stream.
func (p *Plugin) ListAndWatch(_ *v1beta1.Empty, stream grpc.ServerStreamingServer[v1beta1.ListAndWatchResponse]) error {
	for {
		changed := p.health.watch() // before reading, so no change is missed
		if err := stream.Send(&v1beta1.ListAndWatchResponse{Devices: p.devices()}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-changed:
		}
	}
}

// devices advertises, per MIG GPU, as many interchangeable device IDs as
// the GPU can hold instances: the largest MaxInstances among its profiles,
// each with its health ([Plugin.deviceHealth]).
func (p *Plugin) devices() []*v1beta1.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*v1beta1.Device
	ids := p.deviceIDs()
	bad := p.health.unhealthyIDs(p.gpus, ids) // healthpods.go
	for _, g := range p.gpus {
		for _, id := range ids[g.Index] {
			health := v1beta1.Healthy
			if bad[id] {
				health = v1beta1.Unhealthy
			}
			out = append(out, &v1beta1.Device{
				ID: id, Health: health,
				Topology: &v1beta1.TopologyInfo{Nodes: []*v1beta1.NUMANode{{ID: int64(g.NUMA)}}},
			})
		}
	}
	return out
}

// Allocate realizes the reservation of each requested container; see the
// package documentation for how a request is mapped to a container.
//
// Only the selection of the container is serialised; realization runs
// under the manager's per-GPU locks, so Allocate calls for pods on
// different GPUs proceed in parallel.
func (p *Plugin) Allocate(ctx context.Context, req *v1beta1.AllocateRequest) (*v1beta1.AllocateResponse, error) {
	if err := p.guard.Check(ctx); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	resp := &v1beta1.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		uuids, err := p.allocateContainer(ctx, cr.DevicesIds)
		if err != nil {
			p.log.Warn("allocate failed", "devices", len(cr.DevicesIds), "err", err)
			code := codes.Internal
			switch {
			case errors.Is(err, ErrNoPendingPod):
				code = codes.NotFound
			case errors.Is(err, ErrAmbiguous), errors.Is(err, ErrUnreserved), errors.Is(err, ErrUnhealthyGPU):
				code = codes.FailedPrecondition
			}
			return nil, status.Error(code, err.Error())
		}
		cresp, err := containerResponse(p.cfg.DeviceListStrategy, uuids) // devicelist.go
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

func (p *Plugin) allocateContainer(ctx context.Context, ids []string) (_ []string, err error) {
	p.mu.Lock()
	c, err := p.resolve(ctx, len(ids))
	if err == nil {
		p.claims[target{c.pod.UID, c.container}] = realizing // a concurrent call moves on
	}
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	pod, ci := c.pod, c.container
	identityWritten := false
	defer func() { p.settleClaim(target{pod.UID, ci}, identityWritten, err) }()
	if c.listed && p.awaitCache(ctx, pod) {
		c.view = p.view(pod) // with the cache's first observation of its record
	}
	if err := p.refuseUnhealthy(c.view, ci); err != nil {
		return nil, err
	}
	res, err := p.manager.Allocate(ctx, realize.AllocateRequest{
		Pod: c.view, ContainerIndex: ci, Snapshot: p.snapshot(),
	})
	if err != nil {
		return nil, fmt.Errorf("deviceplugin: realize pod %s/%s container %d: %w", pod.Namespace, pod.Name, ci, err)
	}
	// Before the record and the checkpoint: a failed write leaves the
	// container a candidate, and the kubelet's retry writes again.
	if err := p.writeSpecs(res.Devices); err != nil {
		return nil, fmt.Errorf("deviceplugin: pod %s/%s container %d: %w", pod.Namespace, pod.Name, ci, err)
	}
	entries := make([]reservation.Allocation, len(res.Devices))
	uuids := make([]string, len(res.Devices))
	for i, d := range res.Devices {
		entries[i] = d.Entry
		uuids[i] = d.Runtime.MIGUUID
	}
	if _, err := p.writer.WriteRuntime(ctx, pod, entries); err != nil {
		return nil, err
	}
	identityWritten = true
	// Recorded before the kubelet gets them: who was handed an instance
	// is never inferred.
	if err := p.record.handOut(pod.UID, res.Devices); err != nil {
		return nil, fmt.Errorf("deviceplugin: pod %s/%s container %d: write the checkpoint: %w", pod.Namespace, pod.Name, ci, err)
	}
	name := ""
	if cont := kube.ContainerAt(pod, ci); cont != nil {
		name = cont.Name
	}
	p.verify.record(ids, assignment{namespace: pod.Namespace, name: pod.Name, container: name, migUUIDs: uuids})
	p.holdIDs(ids, pod, ci, res.Devices) // for GPU health (healthpods.go)
	p.log.Info("allocated", "pod", pod.Namespace+"/"+pod.Name, "container", ci, "mig", uuids, "device_ids", ids)
	return uuids, nil
}

// awaitCache waits, at most Config.CacheCatchUp, until the pod cache holds
// pod, which a direct listing found: the snapshot Allocate then realizes
// against has every event before pod's bind, such as the ends of the
// victims a preemptor was bound after. Past the bound Allocate goes on
// with the cache it has (a lagging cache only keeps instances) and
// awaitCache reports false.
func (p *Plugin) awaitCache(ctx context.Context, pod *corev1.Pod) bool {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CacheCatchUp)
	defer cancel()
	if p.source.WaitForPod(ctx, pod) {
		return true
	}
	p.log.Warn("the pod cache lags: allocating with it", "pod", pod.Namespace+"/"+pod.Name, "waited", p.cfg.CacheCatchUp)
	return false
}

// settleClaim records how far Allocate got with container t: realized,
// or, when it failed, pending again for the kubelet's retry (unrecorded
// when its runtime identity was already written).
func (p *Plugin) settleClaim(t target, identityWritten bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil && identityWritten:
		p.claims[t] = unrecorded
	case err != nil:
		delete(p.claims, t)
	default:
		p.claims[t] = realized
	}
}

// snapshot is the source's snapshot with every record's runtime
// identities as the checkpoint says ([nodeRecord.overlay]).
func (p *Plugin) snapshot() reservation.Snapshot {
	snap := p.source.Snapshot()
	for i := range snap.Pods {
		p.record.overlay(&snap.Pods[i])
	}
	return snap
}

// view is the source's view of pod with its record's runtime identities as
// the checkpoint says.
func (p *Plugin) view(pod *corev1.Pod) reservation.Pod {
	v := p.source.View(pod)
	p.record.overlay(&v)
	return v
}

// snapshotter is the reconcile runner's snapshot source.
type snapshotter struct{ p *Plugin }

func (s snapshotter) Snapshot() reservation.Snapshot { return s.p.snapshot() }

// resolve finds the container the kubelet is admitting: from the cache,
// then from a direct listing. The caller holds p.mu.
func (p *Plugin) resolve(ctx context.Context, n int) (candidate, error) {
	pods := p.source.Pods()
	p.prune(pods)
	if c, ok, err := p.choose(pods, n); err != nil || ok {
		return c, err
	}
	list, err := p.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", p.cfg.Node).String(),
	})
	if err != nil {
		return candidate{}, fmt.Errorf("deviceplugin: list pods of node %q: %w", p.cfg.Node, err)
	}
	pods = pods[:0]
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == p.cfg.Node {
			pods = append(pods, &list.Items[i])
		}
	}
	c, ok, err := p.choose(pods, n)
	if err != nil || ok {
		c.listed = true
		return c, err
	}
	return candidate{}, fmt.Errorf("%w: node %q, %d devices", ErrNoPendingPod, p.cfg.Node, n)
}

// prune forgets realized containers of pods that are neither in pods, the
// cached listing, nor handed a device by the checkpoint; containers being
// realized stay claimed.
func (p *Plugin) prune(pods []*corev1.Pod) {
	live := map[types.UID]bool{}
	for _, pod := range pods {
		live[pod.UID] = true
	}
	for t, c := range p.claims {
		// The cache may lag the direct listing an Allocate chose from:
		// a container the checkpoint says was handed a device keeps
		// its claim until the record forgets the pod.
		if c != realizing && !live[t.uid] && !p.record.handed(t.uid, t.container) {
			delete(p.claims, t)
		}
	}
}

// PreStartContainer is not used.
func (p *Plugin) PreStartContainer(context.Context, *v1beta1.PreStartContainerRequest) (*v1beta1.PreStartContainerResponse, error) {
	return &v1beta1.PreStartContainerResponse{}, nil
}

// GetPreferredAllocation is not offered; any IDs do.
func (p *Plugin) GetPreferredAllocation(context.Context, *v1beta1.PreferredAllocationRequest) (*v1beta1.PreferredAllocationResponse, error) {
	return &v1beta1.PreferredAllocationResponse{}, nil
}
