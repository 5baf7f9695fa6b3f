package kube_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

// A source started from the observations an earlier one reported dates
// and marks every claim exactly as the earlier one did, so that a restart
// opens no window: a copy first seen without the binding stays
// unscheduled and later even once its kubelet marked it scheduled, and
// Desired resolves the overlap. Without them, the first listing cannot
// tell the two apart. A claim that changed while no source ran is a
// changed claim.
func TestNodePodSourceObservationsSurviveRestart(t *testing.T) {
	for _, restored := range []bool{true, false} {
		t.Run(map[bool]string{true: "restored", false: "lost"}[restored], func(t *testing.T) {
			informerTest(t, func(t *testing.T) {
				const gpu = "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f"
				record := func(p *corev1.Pod, start uint32) *corev1.Pod {
					p.Annotations = map[string]string{reservation.AnnotationKey: reservation.EncodeString([]reservation.Allocation{
						{GPUUUID: gpu, Profile: "1g.5gb", Placement: capability.Placement{Start: start, Size: 1}}})}
					p.Spec.SchedulerName = "dynmig-scheduler"
					p.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
						Limits: corev1.ResourceList{kube.ResourceGPU: resource.MustParse("1")}}}}
					return p
				}
				scheduled := func(p *corev1.Pod) *corev1.Pod {
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
					return p
				}
				t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
				clk := clocktesting.NewFakePassiveClock(t0)
				client := fake.NewClientset(scheduled(record(podOn("a", "owner", "n1", nil), 0)), record(podOn("a", "changed", "n1", nil), 4))
				var mu sync.Mutex
				var kept map[types.UID]kube.Observation
				ctx, stop := context.WithCancel(context.Background())
				first := kube.NewNodePodSource(client, "n1", kube.NodePodSourceOptions{Clock: clk, SchedulerNames: []string{"dynmig-scheduler"},
					OnObservations: func(o map[types.UID]kube.Observation) { mu.Lock(); kept = o; mu.Unlock() }})
				done := make(chan struct{})
				go func() { _ = first.Run(ctx); close(done) }()
				settle(t, func() bool { return first.Snapshot().Complete })

				// The copy: created later with the node preset, then marked
				// scheduled by its kubelet.
				clk.SetTime(t0.Add(time.Minute))
				cp, err := client.CoreV1().Pods("a").Create(context.Background(), record(podOn("a", "copy", "n1", nil), 0), metav1.CreateOptions{})
				require.NoError(t, err)
				synctest.Wait()
				_, err = client.CoreV1().Pods("a").UpdateStatus(context.Background(), scheduled(cp), metav1.UpdateOptions{})
				require.NoError(t, err)
				synctest.Wait()
				require.True(t, reservation.Desired(first.Snapshot()).Authorized, "resolved before the restart")
				stop()
				<-done

				// While no source runs, another pod's claim changes.
				ch, err := client.CoreV1().Pods("a").Get(context.Background(), "changed", metav1.GetOptions{})
				require.NoError(t, err)
				_, err = client.CoreV1().Pods("a").Update(context.Background(), scheduled(record(ch, 5)), metav1.UpdateOptions{})
				require.NoError(t, err)

				clk.SetTime(t0.Add(time.Hour))
				opts := kube.NodePodSourceOptions{Clock: clk, SchedulerNames: []string{"dynmig-scheduler"}}
				mu.Lock()
				require.Len(t, kept, 3)
				if restored {
					opts.Observations = kept
				}
				mu.Unlock()
				second := kube.NewNodePodSource(client, "n1", opts)
				startSource(t, second)
				settle(t, func() bool { return second.Snapshot().Complete })
				view := map[string]reservation.Pod{}
				for _, p := range second.Snapshot().Pods {
					view[p.Name] = p
				}
				set := reservation.Desired(second.Snapshot())
				if !restored {
					assert.True(t, view["copy"].RecordScheduled, "the first listing shows the copy scheduled")
					assert.False(t, set.Authorized, "and cannot tell the two apart")
					return
				}
				assert.True(t, view["owner"].RecordScheduled)
				assert.Equal(t, t0, view["owner"].RecordSeen, "the owner's first observation survives")
				assert.False(t, view["copy"].RecordScheduled, "the copy was first seen without the binding")
				assert.Equal(t, t0.Add(time.Minute), view["copy"].RecordSeen)
				assert.False(t, view["changed"].RecordScheduled, "a claim changed during the restart is not scheduled")
				assert.Equal(t, t0.Add(time.Hour), view["changed"].RecordSeen, "and is dated by the listing")
				assert.True(t, set.Authorized, "resolved after the restart: %v", set.Verdict())
				_, ok := set.Lookup(string(cp.UID), 0, 0)
				assert.False(t, ok, "the copy stays withheld")
			})
		})
	}
}

func TestValidClaim(t *testing.T) {
	valid := reservation.EncodeString([]reservation.Allocation{{GPUUUID: "GPU-8d7f3c2e-5b1a-4c3d-9e8f-0a1b2c3d4e5f", Profile: "1g.5gb",
		Placement: capability.Placement{Start: 0, Size: 1}}})
	for _, c := range []string{"", kube.ClaimOf(valid), kube.ClaimOf("garbage")} {
		assert.True(t, kube.ValidClaim(c), "%q", c)
	}
	for _, c := range []string{"x", "raw:", "raw:" + valid, "scheduled:garbage", "scheduled:" + valid + " "} {
		assert.False(t, kube.ValidClaim(c), "%q", c)
	}
}
