package kube_test

import (
	"strconv"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// BenchmarkSchedulerViewPodUpdate is the cost of one informer update of a
// bound pod with a one-entry record: converting, decoding, the trust rule
// and the ledger update. The baseline, LedgerOnly, is the ledger update
// alone (placement.Ledger.UpdatePod with the same reservation).
func BenchmarkSchedulerViewPodUpdate(b *testing.B) {
	b.Run("LedgerOnly", func(b *testing.B) {
		v, _, gpu := newView(b, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
		rs := schedule.LedgerReservations("uid-p", []reservation.Allocation{alloc(gpu, "3g.20gb", 4, 4)})
		b.ReportAllocs()
		for b.Loop() {
			_ = v.Ledger().UpdatePod("n1", "uid-p", rs)
		}
	})
	b.Run("View", func(b *testing.B) {
		v, pods, gpu := newView(b, clocktesting.NewFakePassiveClock(time.Unix(1000, 0)))
		p := reserved(gpuPod("p", 1, 1), "n1", 1, alloc(gpu, "3g.20gb", 4, 4))
		b.ReportAllocs()
		rv := 1
		for b.Loop() {
			rv++
			p.ResourceVersion = strconv.Itoa(rv)
			pods.OnUpdate(nil, p)
		}
		if _, _, ok := v.Ledger().Pod("uid-p"); !ok {
			b.Fatal("pod not recorded")
		}
	})
}
