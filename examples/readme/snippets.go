package readme

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/placementtest"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/realize/realizetest"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/reservation/reservationtest"
	"github.com/dynmig/dynmig/schedule"
)

// DevicePlugin is docs/embedding.md's "In a device plugin": start-up, then the
// kubelet's Allocate of container ci of pod.
func DevicePlugin(ctx context.Context, client kubernetes.Interface, node string, logger *slog.Logger, pod *corev1.Pod, ci int) error {
	// readme:begin device-plugin
	hw := fakehal.MustNew(fakehal.Options{}) // or nvmlhal.New(nvmlhal.Options{}) and hw.Init(ctx), with cgo
	mgr := realize.NewManager(hw, realize.Options{Logger: logger})
	guard := kube.NewOwnershipGuard(client, node, kube.OwnershipGuardOptions{})
	var runner *kube.ReconcileRunner
	src := kube.NewNodePodSource(client, node, kube.NodePodSourceOptions{
		OnInactive: func(p reservation.Pod) { runner.PodInactive(p) }, // deletion -> reconcile now
	})
	runner = kube.NewReconcileRunner(src, kube.ReconcilerFunc(func(ctx context.Context, s reservation.Snapshot) error {
		if err := guard.Check(ctx); err != nil {
			return err
		}
		_, err := mgr.Maintain(ctx, s) // adopt until settled, reconcile, collect leaks
		return err
	}), kube.ReconcileRunnerOptions{})

	go src.Run(ctx) // returns when ctx is done; owns the informer goroutines
	if !src.WaitForSync(ctx) {
		return ctx.Err()
	}
	if err := guard.Check(ctx); err != nil { // refuse to start while NVIDIA MIG Manager owns the node
		return err
	}
	gpus, _, err := capability.Discover(ctx, hw, capability.DefaultAllowlist()) // the report says what was skipped
	if err != nil {
		return err
	}
	if _, err := kube.NewRegistrationPublisher(client, node, kube.RegistrationPublisherOptions{}).PublishGPUs(ctx, gpus); err != nil {
		return err
	}
	if _, err := mgr.Maintain(ctx, src.Snapshot()); err != nil { // restart recovery: adoption (retried by later passes until it settles)
		return err
	}
	go runner.Run(ctx) // Maintain on an interval with jitter, and when a pod ends

	// kubelet Allocate: choose pod and container ci from server-set data (cmd/dynmig-device-plugin), then
	res, err := mgr.Allocate(ctx, realize.AllocateRequest{Pod: kube.PodView(pod), ContainerIndex: ci, Snapshot: src.Snapshot()})
	if err != nil {
		return err
	}
	realized := make([]reservation.Allocation, len(res.Devices)) // the entries, runtime identity filled in
	for i, d := range res.Devices {
		realized[i] = d.Entry
	}
	_, err = kube.NewAnnotationWriter(client, kube.AnnotationWriterOptions{}).WriteRuntime(ctx, pod, realized)
	// answer with NVIDIA_VISIBLE_DEVICES = each res.Devices[i].Runtime.MIGUUID, comma-separated
	// readme:end
	return err
}

// DRADriver is docs/embedding.md's "In a DRA kubelet plugin": a driver's start-up,
// then the kubelet's NodePrepareResources and NodeUnprepareResources of
// one claim. listClaims returns the node's holders as the driver's
// informer and checkpoint know them; record persists prepared devices.
func DRADriver(ctx context.Context, hw realize.Realizer, logger *slog.Logger, claimUID string,
	listClaims func() (holders []realize.Holder, synced bool), record func([]realize.Device) error) error {
	// readme:begin dra-driver
	mgr := realize.NewManager(hw, realize.Options{Logger: logger})
	demand := func() realize.Demand {
		// every claim allocated to this node, with its checkpointed runtime identities,
		// and every checkpointed claim, whatever the API says of it, until its Unprepare
		holders, synced := listClaims()
		return realize.Demand{Complete: synced, Holders: holders, AdoptAtPlacement: true} // only the scheduler writes allocations
	}
	if _, err := mgr.MaintainDemand(ctx, demand()); err != nil { // at start-up, then periodically
		return err
	}

	// NodePrepareResources of one claim: idempotent, rolls back what it created
	devs, err := mgr.Prepare(ctx, demand(), claimUID)
	if err != nil {
		return err // the kubelet retries
	}
	if err := record(devs); err != nil { // checkpoint devs[i].Entry BEFORE answering
		return err
	}
	// answer with one CDI device per devs[i].Runtime.MIGUUID

	// NodeUnprepareResources of the claim: never destroys an instance in use
	if _, err := mgr.Unprepare(ctx, demand(), claimUID); err != nil {
		return err // in use: the kubelet retries
	}
	// readme:end
	return nil
}

// Scheduler is docs/embedding.md's "In a scheduler": the ledger learns node and the
// bound pods, then reserves a placement for pod, the one being scheduled.
// It returns the annotation value to bind the pod with.
func Scheduler(node *corev1.Node, bound []*corev1.Pod, pod *corev1.Pod) (string, error) {
	// readme:begin scheduler
	ledger := placement.NewLedger(placement.LedgerOptions{})
	gpus, err := kube.NodeGPUs(node) // decodes hami.io/node-nvidia-register
	if err != nil && gpus == nil {
		return "", err // with gpus, err names the entries left out: log it
	}
	if err := ledger.SetNode(node.Name, gpus); err != nil {
		return "", err
	}
	for _, p := range bound { // every bound, active pod
		allocs, err := kube.PodAllocations(p)
		if err != nil {
			return "", err // the extender logs it and keeps the node's other pods
		}
		uid := string(p.UID)
		if err := ledger.AddPod(p.Spec.NodeName, uid, schedule.LedgerReservations(uid, allocs)); err != nil {
			return "", err
		}
	}

	req, err := kube.ParseRequest(pod) // kube.ErrNotMIG for non-MIG pods
	if err != nil {
		return "", err
	}
	if _, err := ledger.Evaluate(node.Name, &req); err != nil { // filter, and the score
		return "", err // unschedulable here: the error says why
	}
	as, err := ledger.Reserve(node.Name, string(pod.UID), &req) // chosen and assumed atomically, before binding
	if err != nil {
		return "", err
	}
	value := reservation.EncodeString(schedule.Allocations(as))
	// bind with value as the Binding's hami.io/vgpu-mig-allocations annotation,
	// conditioned on the pod's UID and resourceVersion, in that one write;
	// on any failure ledger.Forget(string(pod.UID))
	// readme:end
	return value, nil
}

// readme:begin allocator-suite
func TestMyAllocator(t *testing.T) {
	placementtest.Check(t, placementtest.AllocatorFunc(
		func(n *placementtest.Node, req *placement.Request) ([]placement.Assignment, error) {
			return myScheduler.Place(n.GPUs, n.Held, req) // your code
		}), placementtest.Options{Tables: fakehal.Tables()})
}

// readme:end

// readme:begin codec-suite
func TestMyCodec(t *testing.T) {
	reservationtest.Check(t, reservationtest.Codec{Read: myRead, Write: myWrite})
	reservationtest.CheckRegistrationCodec(t, reservationtest.RegistrationCodec{Read: myReadReg, Write: myWriteReg}, fakehal.Tables())
}

// readme:end

// SafetyStep is docs/property-testing.md's use of realizetest.Safety in a device-plugin loop.
func SafetyStep(ctx context.Context, t *testing.T, mgr *realize.Manager, hw realize.Realizer, pod reservation.Pod, snap reservation.Snapshot) {
	// readme:begin safety
	safety := realizetest.NewSafety()
	res, err := mgr.Allocate(ctx, realize.AllocateRequest{Pod: pod, Snapshot: snap})
	if err == nil {
		require.NoError(t, safety.Grant(pod, res.Devices))
	}
	require.NoError(t, safety.Observe(ctx, hw)) // after every step of your loop
	// readme:end
}

// scheduler stands for the reader's own allocator in TestMyAllocator.
type scheduler struct{}

var myScheduler scheduler

// Place answers with this module's default selector.
func (scheduler) Place(gpus []capability.GPU, held [][]placementtest.Instance, req *placement.Request) ([]placement.Assignment, error) {
	return placementtest.Selector(placement.SelectorOptions{}).Allocate(&placementtest.Node{GPUs: gpus, Held: held}, req)
}

// The reader's own codec in TestMyCodec: this module's strict one.
var (
	myRead     = reservationtest.Strict().Read
	myWrite    = reservationtest.Strict().Write
	myReadReg  = reservationtest.StrictRegistration().Read
	myWriteReg = reservationtest.StrictRegistration().Write
)
