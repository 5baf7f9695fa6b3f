package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultPodResourcesSocket is where the kubelet serves its PodResources
// API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// MetricMismatches counts realized MIG devices the kubelet gave a
// container other than the one the plugin realized them for.
const MetricMismatches = "dynmig_deviceplugin_allocation_mismatches_total"

// assignment is what the plugin realized for the device IDs of one
// Allocate: the pod and container it chose and the MIG devices.
type assignment struct {
	namespace, name, container string
	migUUIDs                   []string
}

// Mismatch is one device ID that the kubelet's PodResources API reports
// assigned to a container other than the one the plugin realized its MIG
// device for.
type Mismatch struct {
	DeviceID string
	// Realized is the namespace/name and container the plugin chose.
	Realized, RealizedContainer string
	// Assigned is the namespace/name and container the kubelet reports.
	Assigned, AssignedContainer string
	// MIGUUIDs are the MIG devices realized for the Allocate.
	MIGUUIDs []string
}

func (m Mismatch) String() string {
	return fmt.Sprintf("device %s: realized for %s container %s, kubelet assigned it to %s container %s (MIG %v)",
		m.DeviceID, m.Realized, m.RealizedContainer, m.Assigned, m.AssignedContainer, m.MIGUUIDs)
}

// verifier remembers assignments by device ID and compares them with the
// kubelet's view.
type verifier struct {
	mu       sync.Mutex
	byDevice map[string]assignment
	reported map[string]bool // device ID + assigned pod already counted
	counter  prometheus.Counter
	count    atomic.Uint64 // the counter's value, for Mismatches
}

func newVerifier() *verifier {
	return &verifier{byDevice: map[string]assignment{}, reported: map[string]bool{},
		counter: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricMismatches,
			Help: "Realized MIG devices the kubelet assigned to a container other than the one they were realized for"})}
}

// record remembers the assignment of ids; a device ID the kubelet hands
// out again replaces its earlier assignment.
func (v *verifier) record(ids []string, a assignment) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, id := range ids {
		v.byDevice[id] = a
	}
}

// compare returns the new mismatches between the plugin's assignments and
// the kubelet's listing, each counted once.
func (v *verifier) compare(resource string, list *podresourcesv1.ListPodResourcesResponse) []Mismatch {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Mismatch
	for _, pr := range list.GetPodResources() {
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != resource {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					a, ok := v.byDevice[id]
					if !ok || a.namespace == pr.GetNamespace() && a.name == pr.GetName() && a.container == c.GetName() {
						continue
					}
					key := id + "\x00" + pr.GetNamespace() + "/" + pr.GetName() + "\x00" + c.GetName()
					if v.reported[key] {
						continue
					}
					v.reported[key] = true
					v.counter.Inc()
					v.count.Add(1)
					out = append(out, Mismatch{DeviceID: id, Realized: a.namespace + "/" + a.name, RealizedContainer: a.container,
						Assigned: pr.GetNamespace() + "/" + pr.GetName(), AssignedContainer: c.GetName(), MIGUUIDs: slices.Clone(a.migUUIDs)})
				}
			}
		}
	}
	return out
}

// ErrPodResources: the kubelet's PodResources API could not be listed.
var ErrPodResources = errors.New("deviceplugin: kubelet PodResources API")

// VerifyAssignments lists the kubelet's PodResources API (v1 List over
// Config.PodResourcesSocket) and checks that every device ID this plugin
// realized MIG devices for went to the container it chose. Each mismatch
// is logged with both pods, counted once in [MetricMismatches] and
// returned. With no socket configured it does nothing. Errors match
// [ErrPodResources].
func (p *Plugin) VerifyAssignments(ctx context.Context) ([]Mismatch, error) {
	if p.cfg.PodResourcesSocket == "" {
		return nil, nil
	}
	conn, err := grpc.NewClient("unix://"+p.cfg.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPodResources, err)
	}
	defer conn.Close()
	list, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("%w: list: %w", ErrPodResources, err)
	}
	found := p.verify.compare(p.cfg.ResourceName, list)
	for _, m := range found {
		p.log.ErrorContext(ctx, "MIG device went to another container than the one it was realized for",
			"device_id", m.DeviceID, "realized_for", m.Realized, "realized_container", m.RealizedContainer,
			"assigned_to", m.Assigned, "assigned_container", m.AssignedContainer, "mig", m.MIGUUIDs)
	}
	return found, nil
}

// Mismatches returns the number of mismatches found so far.
func (p *Plugin) Mismatches() uint64 {
	return p.verify.count.Load()
}

// Collectors returns the plugin's Prometheus collectors, for registration
// by the embedding program.
func (p *Plugin) Collectors() []prometheus.Collector {
	return []prometheus.Collector{p.verify.counter}
}
