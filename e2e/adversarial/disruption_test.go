package adversarial_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/dynmig/dynmig/e2e/internal/cluster"
)

// outage is how long the tests keep the API server away from the device
// plugin: long enough for its watch to break, its relists to fail and
// several maintenance passes to run on an incomplete listing.
const outage = 3 * time.Second

// TestAPIServerRestartMidLifecycle: the API server is stopped and started
// again over the same etcd while pods are at every stage of their
// lifecycle: a and b realized and running, c bound but not yet admitted.
//
// Claims: nothing is destroyed while the server is down, nor by the
// maintenance passes that run after the restart on a listing the plugin
// has not yet renewed (the monitor checks the devices of a and b
// throughout; a pass that started during the outage waits on its API
// calls, so passes resume only after the restart); after the
// restart c is admitted and receives its reservation, a new pod d is
// scheduled and realized (the scheduler's and the device plugin's informers
// recovered), a pod deleted after the restart (a) has its device
// reclaimed, and the node ends with exactly the devices of b, c and d,
// each the one its record names. Nothing is lost: every pod bound before
// the restart keeps its reservation. Run against each scheduler.
func TestAPIServerRestartMidLifecycle(t *testing.T) {
	eachScheduler(t, apiServerRestartMidLifecycle)
}

func apiServerRestartMidLifecycle(t *testing.T, s scheduler) {
	e := newEnv(t, envOptions{scheduler: s})

	a := e.schedule(migPod("a", "4000"))
	e.mustAdmit(a.Name)
	b := e.schedule(migPod("b", "9000"))
	e.mustAdmit(b.Name)
	c := e.schedule(migPod("c", "4000"))
	recordC := entries(t, c)
	live := liveMIGs(e.hw)

	e.c.StopAPIServer()
	passes := e.plugin.Reconciles()
	time.Sleep(outage) // the outage itself: nothing to wait for
	if err := e.c.StartAPIServer(); err != nil {
		t.Fatalf("restart API server: %v", err)
	}
	t.Logf("maintenance passes during the outage: %d", e.plugin.Reconciles()-passes)
	if got := liveMIGs(e.hw); !slices.Equal(got, live) {
		t.Errorf("live MIG devices after the outage %v, want those before it %v", got, live)
	}

	// Passes on a listing that follows the restart.
	e.waitPasses(3)
	e.mustAdmit(c.Name)
	if got := entries(t, e.get(c.Name)); !sameReservation(got, recordC) {
		t.Errorf("c's reservation changed across the restart: %v, want %v", got, recordC)
	}
	d := e.schedule(migPod("d", "4000"))
	e.mustAdmit(d.Name)
	e.remove(a.Name)
	e.waitPasses(3)
	e.finalCheck()
}

// TestWatchDropAndPartition: the device plugin's connections to the API
// server are cut (its watch breaks and requests in flight fail) while the
// rest of the cluster goes on: first a partition during which a running
// pod is deleted and another is scheduled, then repeated drops with
// immediate reconnection.
//
// Claims: during the partition no device in use is destroyed, although
// the plugin cannot see the deletion (its listing is incomplete, so
// nothing is authorised); once the partition heals, the deleted pod's
// device is reclaimed, the pod scheduled meanwhile is admitted and
// realized, and after the drops a further pod is too; the node ends with
// exactly the devices in use, each the one its record names. Run against
// each scheduler: it places c while the device plugin cannot see a's
// deletion, possibly on a's slots.
func TestWatchDropAndPartition(t *testing.T) {
	eachScheduler(t, watchDropAndPartition)
}

func watchDropAndPartition(t *testing.T, s scheduler) {
	var cut *partition
	e := newEnv(t, envOptions{scheduler: s, pluginClient: func(c *cluster.Cluster) kubernetes.Interface {
		cut = startPartition(t, c.Host())
		return cut.client(t, c.AdminConfig())
	}})

	a := e.schedule(migPod("a", "4000"))
	e.mustAdmit(a.Name)
	b := e.schedule(migPod("b", "9000"))
	e.mustAdmit(b.Name)

	cut.block()
	refused := cut.refused()
	migA := e.end(a.Name)
	c := e.schedule(migPod("c", "4000"))
	e.waitFor("the plugin reconnecting in vain", func(context.Context) (bool, error) {
		return cut.refused() >= refused+3, nil
	})
	time.Sleep(outage) // the partition itself: nothing to wait for
	if !slices.Contains(liveMIGs(e.hw), migA) {
		t.Errorf("a's device %s was destroyed while the plugin could not list the node's pods (no complete listing authorised it)", migA)
	}
	cut.unblock()
	e.waitReclaimed(a.Name, migA)
	e.mustAdmit(c.Name)

	for range 5 {
		cut.drop()
		time.Sleep(100 * time.Millisecond)
	}
	d := e.schedule(migPod("d", "4000"))
	e.mustAdmit(d.Name)
	e.waitPasses(3)
	e.finalCheck()
}
