package kube_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// liveHeap is the heap in use after two collections.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// scaleCluster is a cluster as a scheduler's informers hold it: nodes of
// eight A100-SXM4-40GB, each with its registration, and bound MIG pods
// with one realized entry each, podsPerNode per node (at most one per GPU).
type scaleCluster struct {
	nodes       []*corev1.Node
	podsPerNode int
	pods        []*corev1.Pod
}

func newScaleCluster(tb testing.TB, nodes, podsPerNode int) *scaleCluster {
	tb.Helper()
	c := &scaleCluster{podsPerNode: min(podsPerNode, 8)}
	for i := range nodes {
		hw := fakehal.MustNew(fakehal.Options{GPUs: fakehal.Repeat(8, "A100-SXM4-40GB"), Seed: uint64(i)})
		gpus, _, err := capability.Discover(context.Background(), hw, capability.DefaultAllowlist())
		if err != nil {
			tb.Fatal(err)
		}
		devs, err := capability.NewMIGNodeDevices(gpus, nil)
		if err != nil {
			tb.Fatal(err)
		}
		reg, err := capability.EncodeNodeRegistration(devs)
		if err != nil {
			tb.Fatal(err)
		}
		name := fmt.Sprintf("gpu-node-%05d", i)
		c.nodes = append(c.nodes, scaleNode(name, string(reg)))
	}
	return c
}

// makePods builds the cluster's pods: podsPerNode per node, the k-th on
// the node's k-th GPU (at most eight).
func (c *scaleCluster) makePods(tb testing.TB) {
	c.pods = nil
	for i, n := range c.nodes {
		gpus, err := kube.NodeGPUs(n)
		if err != nil {
			tb.Fatal(err)
		}
		for j := range c.podsPerNode {
			c.pods = append(c.pods, scalePod(n.Name, i*c.podsPerNode+j, gpus[j].UUID))
		}
	}
}

func scaleNode(name, reg string) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("128"),
		corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods:   resource.MustParse("110"),
		kube.ResourceGPU:      resource.MustParse("56"),
	}
	t := metav1.Unix(1000, 0)
	var conds []corev1.NodeCondition
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeReady} {
		conds = append(conds, corev1.NodeCondition{Type: c, Status: corev1.ConditionFalse, LastHeartbeatTime: t, LastTransitionTime: t, Reason: "Kubelet" + string(c), Message: "kubelet reports " + string(c)})
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("%08x-0000-4000-8000-000000000000", len(name))), ResourceVersion: "100",
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"node.kubernetes.io/instance-type": "p4d.24xlarge", "topology.kubernetes.io/zone": "zone-a", "nvidia.com/gpu.present": "true"},
			Annotations: map[string]string{capability.NodeRegisterAnnotation: reg, "node.alpha.kubernetes.io/ttl": "0"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24", ProviderID: "aws:///zone-a/" + name},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy(), Conditions: conds,
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "containerd://2.1.0", OSImage: "Ubuntu 24.04", KernelVersion: "6.8.0", Architecture: "amd64", OperatingSystem: "linux"}},
	}
}

// scalePod is pod i bound to node, as the scheduler's informer holds it
// (no managedFields): one container with one realized 3g.20gb device on
// gpu, Running.
func scalePod(node string, i int, gpu string) *corev1.Pod {
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
	record := reservation.EncodeString([]reservation.Allocation{{GPUUUID: gpu, Profile: "3g.20gb",
		Placement: capability.Placement{Start: 4, Size: 4}, MIGUUID: "MIG-" + uid,
		GPUInstanceID: reservation.SomeID(2), ComputeInstanceID: reservation.SomeID(0)}})
	t := metav1.Unix(1000, 0)
	name := "train-" + strconv.Itoa(i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID(uid), ResourceVersion: strconv.Itoa(1000 + i),
			CreationTimestamp: t, Labels: map[string]string{"app": "train", "pod-template-hash": "5d8f7c9b4"},
			Annotations:     map[string]string{kube.VGPUModeAnnotation: kube.VGPUModeMIG, reservation.AnnotationKey: record},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "train-5d8f7c9b4", UID: "rs-uid", Controller: new(true)}}},
		Spec: corev1.PodSpec{NodeName: node, SchedulerName: "dynmig-scheduler", ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "cuda", Image: "nvcr.io/nvidia/pytorch:25.01-py3",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
					Limits:   corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1"), kube.ResourceGPUMem: resource.MustParse("20000")}},
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.1.2.3", PodIP: "10.0.0.17", StartTime: &t, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t}, {Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "cuda", Ready: true, Image: "nvcr.io/nvidia/pytorch:25.01-py3",
				ContainerID: "containerd://" + uid, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}}}}},
	}
}

// BenchmarkSchedulerMemoryAtScale reports the live heap a scheduler holds
// for 5,000 nodes of eight A100-SXM4-40GB and 40,000 bound MIG pods (one
// realized device each), split into the informers' own objects (a
// client-go store of the Node and Pod objects) and dynmig's state: the
// placement.Ledger alone, fed with SetNode and UpdatePod, and the
// kube.SchedulerView with its ledger, fed through its informer handlers
// with the store's objects. "after node update" feeds every node once
// more as a fresh copy with the same registration (what the informer
// delivers when the kubelet updates its status) and counts what the view
// then keeps besides the store's objects. Each figure is the difference of
// the live heap after two collections; run it with -benchtime 1x.
func BenchmarkSchedulerMemoryAtScale(b *testing.B) {
	const nodes, podsPerNode = 5000, 8
	base := liveHeap()
	c := newScaleCluster(b, nodes, podsPerNode)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, n := range c.nodes {
		_ = store.Add(n)
	}
	withNodeObjects := liveHeap()
	c.makePods(b)
	for _, p := range c.pods {
		_ = store.Add(p)
	}
	withObjects := liveHeap()
	b.ReportMetric(float64(withNodeObjects-base)/float64(len(c.nodes)), "informer-B/node")
	b.ReportMetric(float64(withObjects-withNodeObjects)/float64(len(c.pods)), "informer-B/pod")

	perNode := func(after, before int64) float64 { return float64(after-before) / float64(len(c.nodes)) }
	perRes := func(after, before int64) float64 { return float64(after-before) / float64(len(c.pods)) }

	ledger := placement.NewLedger(placement.LedgerOptions{})
	for _, n := range c.nodes {
		gpus, err := kube.NodeGPUs(n)
		if err != nil {
			b.Fatal(err)
		}
		if err := ledger.SetNode(n.Name, gpus); err != nil {
			b.Fatal(err)
		}
	}
	withNodes := liveHeap()
	for _, p := range c.pods {
		allocs, err := kube.PodAllocations(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := ledger.UpdatePod(p.Spec.NodeName, string(p.UID), schedule.LedgerReservations(string(p.UID), allocs)); err != nil {
			b.Fatal(err)
		}
	}
	withPods := liveHeap()
	b.ReportMetric(perNode(withNodes, withObjects), "ledger-B/node")
	b.ReportMetric(perRes(withPods, withNodes), "ledger-B/reservation")
	runtime.KeepAlive(ledger)
	ledger = nil

	withObjects = liveHeap()
	view := kube.NewSchedulerView(placement.NewLedger(placement.LedgerOptions{}),
		kube.SchedulerViewOptions{Clock: clocktesting.NewFakePassiveClock(time.Unix(2000, 0))})
	for _, n := range c.nodes {
		view.NodeHandler().OnAdd(n, true)
	}
	withNodes = liveHeap()
	for _, p := range c.pods {
		view.PodHandler().OnAdd(p, true)
	}
	withPods = liveHeap()
	if _, _, ok := view.Ledger().Pod(string(c.pods[len(c.pods)-1].UID)); !ok {
		b.Fatal("the view did not record the pods")
	}
	b.ReportMetric(perNode(withNodes, withObjects), "view-B/node")
	b.ReportMetric(perRes(withPods, withNodes), "view-B/reservation")

	for i, n := range c.nodes {
		fresh := n.DeepCopy()
		fresh.ResourceVersion = "200"
		// Decoded anew, as from the API server: DeepCopy shares strings.
		fresh.Annotations[capability.NodeRegisterAnnotation] = strings.Clone(n.Annotations[capability.NodeRegisterAnnotation])
		view.NodeHandler().OnUpdate(n, fresh)
		_ = store.Update(fresh)
		c.nodes[i] = fresh
	}
	updated := liveHeap()
	b.ReportMetric(perNode(updated-withPods+withNodes, withObjects), "view-B/node-after-node-update")
	runtime.KeepAlive(store)
	runtime.KeepAlive(view)
	runtime.KeepAlive(c)
}
