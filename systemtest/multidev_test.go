package systemtest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/deviceplugin"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// handedDev is one MIG device the plugin handed a pod, and the checkpoint
// epoch in which it did.
type handedDev struct {
	mig   string
	epoch int
}

// mdevStats counts the multi-device and multi-container paths of the
// device-plugin model (see mdevPaths).
type mdevStats struct {
	// Pods admitted whose containers were handed more than one device in
	// all, and pods of more than one container admitted.
	multiDevice, multiContainer int
	// A multi-device container's Allocate failed part-way (an NVML fault
	// on a later device's create), rolled back, and the kubelet's retry
	// handed its devices.
	partialRetried int
	// The plugin restarted between two containers' Allocates of one pod.
	restartBetween int
	// The plugin's log lines for instances a failed Allocate rolled back,
	// and for instances an Allocate took over (adopted) rather than
	// created: rollback-adopted's guard needs both in one call.
	rollbacks, allocAdoptions int
}

// mdevPaths are the multi-device paths TestDevicePlugin claims to
// exercise, with how often each was reached.
func mdevPaths(st *dpStats) []coveredPath {
	return []coveredPath{
		{"an honest pod handed more than one device, admitted", st.multiDevice},
		{"an honest pod of more than one container, admitted", st.multiContainer},
		{"a multi-device container's Allocate failed part-way, rolled back, and its retry handed every device", st.partialRetried},
		{"the plugin restarted between two containers' Allocates of one pod", st.restartBetween},
	}
}

// drawLayout draws an honest pod's containers (one or two) and the devices
// each requests (one or two), each device on its own slot of free, as the
// scheduler places a pod's devices on distinct free placements. A
// container that gets no slot is dropped.
func drawLayout(t *rapid.T, free []uint32) [][]uint32 {
	free = slices.Clone(free)
	containers := rapid.IntRange(1, 2).Draw(t, "containers")
	var out [][]uint32
	for c := range containers {
		n := rapid.IntRange(1, 2).Draw(t, fmt.Sprintf("devices of container %d", c))
		var slots []uint32
		for range n {
			if len(free) == 0 {
				break
			}
			i := rapid.IntRange(0, len(free)-1).Draw(t, "slot")
			slots = append(slots, free[i])
			free = slices.Delete(free, i, i+1)
		}
		if len(slots) > 0 {
			out = append(out, slots)
		}
	}
	return out
}

// layoutRecord is the scheduler's record for layout on the model's GPU.
func (s *dpSystem) layoutRecord(layout [][]uint32) string {
	var entries []reservation.Allocation
	for c, slots := range layout {
		for d, slot := range slots {
			a := s.entry(slot)
			a.ContainerIndex, a.DeviceIndex = c, d
			entries = append(entries, a)
		}
	}
	return reservation.EncodeString(entries)
}

// withContainers gives pod one container per entry of layout, each
// requesting its devices; the first keeps its name "main".
func withContainers(pod *corev1.Pod, layout [][]uint32) {
	pod.Spec.Containers = nil
	for c, slots := range layout {
		name := "main"
		if c > 0 {
			name = fmt.Sprintf("c%d", c)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{kube.ResourceGPU: *resource.NewQuantity(int64(len(slots)), resource.DecimalSI)}}})
	}
}

// layoutOf returns the slots of each container of p: the scheduler's
// layout, or one container with one device at p.slot.
func layoutOf(p *dpPod) [][]uint32 {
	if p.layout != nil {
		return p.layout
	}
	return [][]uint32{{p.slot}}
}

// slotsOf returns every slot the scheduler chose for p.
func slotsOf(p *dpPod) []uint32 { return slices.Concat(layoutOf(p)...) }

// admitContainers: the kubelet's device manager calls Allocate once per
// container, in container order, for the pod it admits. It returns the
// MIG devices each container was handed, or the index of the container
// whose Allocate failed (after the kubelet's retries for an honest pod)
// and its error. A multi-container pod may see the plugin restart between
// two containers' calls.
func (s *dpSystem) admitContainers(t *rapid.T, p *dpPod, before map[string]bool) (int, error) {
	layout := layoutOf(p)
	for c, slots := range layout {
		if c > 0 {
			s.restartBetween(t)
		}
		migs, err := s.allocateContainer(t, p, len(slots))
		if err != nil {
			return c, err
		}
		s.checkHanded(t, p, c, migs, before)
		for _, mig := range migs {
			p.handed = append(p.handed, handedDev{mig: mig, epoch: s.epoch})
		}
		p.mig, p.epoch, p.recordedEpoch = p.handed[0].mig, p.handed[0].epoch, s.epoch
	}
	return -1, nil
}

// restartBetween: the plugin may restart, its checkpoint kept or lost,
// after a container's Allocate and before the next one's.
func (s *dpSystem) restartBetween(t *rapid.T) {
	how := rapid.SampledFrom([]string{"", "", "kept", "lost"}).Draw(t, "restart between containers")
	if how == "" {
		return
	}
	s.restartWith(t, "", how)
	s.stats.restartBetween++
}

// allocateContainer is the kubelet's Allocate for the next container of
// p, which requests n devices, with its retries for an honest pod. For an
// honest multi-device container an NVML fault may fail the create of a
// later device: the manager rolls back what the call created, and the
// retry must hand every device (partialRetried). After every failed call
// no instance the call created may remain.
func (s *dpSystem) allocateContainer(t *rapid.T, p *dpPod, n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("id%d", i)
	}
	req := &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{{DevicesIds: ids}}}
	var fault *fakehal.Injected
	if p.kind == honest && n > 1 && !s.unhealthy && rapid.Bool().Draw(t, "fault on a later device's create") {
		fault = s.hw.Inject(s.laterCreateFault(t, n))
	}
	resp, err := s.allocateOnce(t, p, req)
	partial := fault != nil && fault.Fired() > 0
	if fault != nil {
		fault.Remove()
	}
	// The kubelet retries; an instance whose pod vanished from the
	// listing without being seen deleting is kept for the manager's
	// AbsentPodGrace, which the fake clock passes, and a slot freed by a
	// pod that just ended may hold its instance until a maintenance pass.
	for try := 0; err != nil && p.kind == honest && try < 3; try++ {
		s.barrier(t)
		s.clk.Step(dpGrace)
		s.pass(t)
		resp, err = s.allocateOnce(t, p, req)
	}
	if err != nil {
		return nil, err
	}
	if partial {
		s.stats.partialRetried++
	}
	return strings.Split(resp.ContainerResponses[0].Envs[deviceplugin.VisibleDevicesEnv], ","), nil
}

// laterCreateFault draws an NVML fault that fails the create of one of
// the devices after the first of an n-device container (its GPU instance
// or its compute instance).
func (s *dpSystem) laterCreateFault(t *rapid.T, n int) fakehal.Fault {
	nth := rapid.IntRange(2, n).Draw(t, "failed create")
	if rapid.Bool().Draw(t, "fail the compute instance") {
		return fakehal.Fault{Op: fakehal.OpCreateCI, Nth: nth, Err: realize.ErrNotSupported}
	}
	return fakehal.Fault{Op: fakehal.OpCreateGI, Nth: nth, Err: realize.ErrOccupied}
}

// allocateOnce is one Allocate call. When it fails, the call must leave
// no instance it created: the manager rolls back what a failed attempt
// created, and nothing else in the model creates instances meanwhile.
func (s *dpSystem) allocateOnce(t *rapid.T, p *dpPod, req *v1beta1.AllocateRequest) (*v1beta1.AllocateResponse, error) {
	before := s.liveMIGs()
	resp, err := s.plugin.Allocate(context.Background(), req)
	if err == nil {
		return resp, nil
	}
	for mig := range s.liveMIGs() {
		if !before[mig] {
			t.Fatalf("%s's failed Allocate (%v) left the instance %s it created; %s", p.name, err, mig, s.diagnose())
		}
	}
	return nil, err
}

// checkHanded checks the devices container c of p was handed: one per
// requested device; none a new instance on the unhealthy GPU; none held
// by a running pod or by p itself already; an ended pod's device only
// once the checkpoint that recorded its hand-out is lost (the residual
// endedReused); each the device p's record now names for that container
// and device index; and, for a pod the scheduler bound, each at the
// placement the scheduler chose.
func (s *dpSystem) checkHanded(t *rapid.T, p *dpPod, c int, migs []string, before map[string]bool) {
	slots := layoutOf(p)[c]
	if len(migs) != len(slots) {
		t.Fatalf("%s (%s) container %d asked for %d devices and was handed %v; %s", p.name, p.kind, c, len(slots), migs, s.diagnose())
	}
	allocs, err := kube.PodAllocations(s.get(t, p.name))
	if err != nil {
		t.Fatalf("%s's record: %v", p.name, err)
	}
	for d, mig := range migs {
		s.checkNotHeld(t, p, mig, before)
		i := slices.IndexFunc(allocs, func(a reservation.Allocation) bool { return a.ContainerIndex == c && a.DeviceIndex == d })
		if i < 0 {
			t.Fatalf("%s container %d was handed %s but its record names no device %d: %v", p.name, c, mig, d, allocs)
		}
		if id, ok := allocs[i].Runtime(); !ok || id.MIGUUID != mig {
			t.Fatalf("%s container %d was handed %s as device %d but its record names %v", p.name, c, mig, d, allocs[i])
		}
		if at := s.placementOf(mig); p.kind == honest && at != s.entry(slots[d]).Placement {
			t.Fatalf("%s container %d was scheduled at slot %d but handed %s at %v", p.name, c, slots[d], mig, at)
		}
	}
}

// checkNotHeld checks that mig, just handed to p, is no running pod's and
// not p's own already, is no new instance on an unhealthy GPU (before are
// the instances live when the kubelet began admitting p), and is an
// ended pod's only once the checkpoint that recorded its hand-out is lost.
func (s *dpSystem) checkNotHeld(t *rapid.T, p *dpPod, mig string, before map[string]bool) {
	if s.unhealthy && !before[mig] {
		t.Fatalf("%s (%s) was handed %s, a new instance on the unhealthy GPU; %s", p.name, p.kind, mig, s.diagnose())
	}
	for _, o := range s.pods {
		i := slices.IndexFunc(o.handed, func(h handedDev) bool { return h.mig == mig })
		if i < 0 {
			continue
		}
		if o == p || o.running() {
			t.Fatalf("%s (%s) was handed %s, which %s holds; %s", p.name, p.kind, mig, o.name, s.diagnose())
		}
		// An ended pod's device handed to a pod whose record copies
		// it: the residual, only once the checkpoint that recorded the
		// handout is lost.
		if o.handed[i].epoch == s.epoch {
			t.Fatalf("%s (%s) was handed %s, which ended %s was handed and the checkpoint recorded; %s", p.name, p.kind, mig, o.name, s.diagnose())
		}
		s.stats.endedReused++
	}
}

// countLogged adds the plugin log's rollbacks and Allocate adoptions of
// the sequence to the stats.
func (s *dpSystem) countLogged() {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	log := s.log.buf.String()
	s.stats.rollbacks += strings.Count(log, `msg="rolled back instance"`)
	s.stats.allocAdoptions += strings.Count(log, `msg="adopted instance on allocate"`)
}
