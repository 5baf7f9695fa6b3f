package dradriver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
)

// apiEnv is an env whose driver has an API client holding claims.
func apiEnv(t *testing.T, models ...string) (*env, *fake.Clientset) {
	t.Helper()
	e := newEnv(t, models...)
	client := fake.NewClientset()
	e.client = client
	return e, client
}

func createClaims(t *testing.T, client *fake.Clientset, claims ...*resourceapi.ResourceClaim) {
	t.Helper()
	for _, c := range claims {
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func deleteClaim(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim) {
	t.Helper()
	if err := client.ResourceV1().ResourceClaims(c.Namespace).Delete(context.Background(), c.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func maintain(t *testing.T, d *dradriver.Driver) {
	t.Helper()
	if _, err := d.Maintain(context.Background()); err != nil {
		t.Fatalf("maintain: %v", err)
	}
}

func isHeld(err error, by string) bool {
	var held *dradriver.DeviceHeldError
	return errors.As(err, &held) && errors.Is(err, dradriver.ErrDeviceHeld) && held.Claim == by
}

// TestReleaseOnlyByKubelet: a force-deleted pod's claim is deallocated and
// deleted from the API while its container may still hold the device.
// Neither maintenance, nor a restart, nor the API's word destroys the
// instance; a new claim allocated the same device is refused until the
// kubelet unprepares the old one, and then gets a new instance.
func TestReleaseOnlyByKubelet(t *testing.T) {
	e, client := apiEnv(t, "NVIDIA A30")
	d := e.driver(t)
	a := allocate(t, d.Catalog(), profileClaim("uid-a", "2g.12gb", 1))
	createClaims(t, client, a)
	e.claims.set(true, a)
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	aLive := liveInstances(e.hw)

	deleteClaim(t, client, a)
	e.claims.set(true)
	maintain(t, d)
	if got := liveInstances(e.hw); !slices.Equal(got, aLive) {
		t.Fatalf("live %v after maintenance on a deleted claim, want %v kept", got, aLive)
	}
	d = e.driver(t) // restart: adoption, idle-GPU cleaning
	if got := liveInstances(e.hw); !slices.Equal(got, aLive) {
		t.Fatalf("live %v after a restart, want %v kept", got, aLive)
	}
	if st := d.Manager().Stats(); st.Destroys != 0 || st.Adoptions != 1 {
		t.Errorf("restart: destroys %d, adoptions %d; want 0, 1", st.Destroys, st.Adoptions)
	}

	// The scheduler hands a's device to b.
	b := claimFor("uid-b", a.Status.Allocation.Devices.Results[0].Device)
	createClaims(t, client, b)
	e.claims.set(true, b)
	if r := prepareOne(t, d, b); !isHeld(r.Err, "uid-a") {
		t.Errorf("prepare b on a's device: %v, want held by uid-a", r.Err)
	}
	maintain(t, d)
	if got := liveInstances(e.hw); !slices.Equal(got, aLive) {
		t.Fatalf("live %v, want %v kept", got, aLive)
	}
	if _, ok := d.Checkpoint().Claim("uid-b"); ok {
		t.Error("a refused claim is checkpointed")
	}

	if err := unprepareOne(t, d, a); err != nil {
		t.Fatalf("kubelet's unprepare of a: %v", err)
	}
	r := prepareOne(t, d, b)
	if r.Err != nil {
		t.Fatalf("prepare b after a's unprepare: %v", r.Err)
	}
	if got := liveInstances(e.hw); len(got) != 1 || got[0].MIGUUID == aLive[0].MIGUUID {
		t.Errorf("live %v, want one new instance for b (a's was %s)", got, aLive[0].MIGUUID)
	}
}

// TestTwoPhaseCheckpoint: a claim is checkpointed PrepareStarted before
// anything is created. A failed preparation stays PrepareStarted (what it
// created is rolled back); the kubelet's retry completes it. A
// PrepareStarted claim the API server confirms deleted was never handed
// to a container, so maintenance unprepares it; one that still exists is
// left to the kubelet.
func TestTwoPhaseCheckpoint(t *testing.T) {
	e, client := apiEnv(t, "NVIDIA A30")
	d := e.driver(t)
	a := allocate(t, d.Catalog(), profileClaim("uid-a", "1g.6gb", 1))
	b := allocate(t, d.Catalog(), profileClaim("uid-b", "1g.6gb", 1), a)
	createClaims(t, client, a, b)
	e.claims.set(true, a, b)

	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		f := e.hw.FailNth(fakehal.OpCreateCI, 1, errors.New("injected"))
		if r := prepareOne(t, d, c); r.Err == nil {
			t.Fatalf("prepare %s with a failing create succeeded", c.UID)
		}
		f.Remove()
		pc, ok := d.Checkpoint().Claim(string(c.UID))
		if !ok || pc.State != dradriver.PrepareStarted || len(pc.Devices) != 1 || pc.Devices[0].Runtime.MIGUUID != "" {
			t.Fatalf("checkpoint after a failed prepare: %+v, %t; want PrepareStarted without identity", pc, ok)
		}
	}
	if got := liveInstances(e.hw); len(got) != 0 {
		t.Fatalf("live %v after failed prepares, want none", got)
	}
	// a's retry completes it; b's claim is deleted.
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	if pc, _ := d.Checkpoint().Claim("uid-a"); pc.State != dradriver.PrepareCompleted || pc.Devices[0].Runtime.MIGUUID == "" {
		t.Errorf("after the retry: %+v, want PrepareCompleted with an identity", pc)
	}
	deleteClaim(t, client, b)
	deleteClaim(t, client, a) // completed: only the kubelet unprepares it
	e.claims.set(true)
	maintain(t, d)
	if _, ok := d.Checkpoint().Claim("uid-b"); ok {
		t.Error("a deleted PrepareStarted claim is still checkpointed after maintenance")
	}
	if _, ok := d.Checkpoint().Claim("uid-a"); !ok || len(liveInstances(e.hw)) != 1 {
		t.Errorf("a deleted PrepareCompleted claim was released by maintenance; live %v", liveInstances(e.hw))
	}
}

// TestCrashBetweenPhases: the driver dies after creating an instance but
// before checkpointing PrepareCompleted. The restarted driver keeps the
// instance (it is the PrepareStarted claim's, at its placement), and the
// kubelet's retry hands it out without creating another.
func TestCrashBetweenPhases(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	a := allocate(t, d.Catalog(), profileClaim("uid-a", "2g.12gb", 1))
	e.claims.set(true, a)
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	// Rewrite the checkpoint as the crash left it.
	ck := d.Checkpoint()
	ck.Claims[0].State = dradriver.PrepareStarted
	for i := range ck.Claims[0].Devices {
		ck.Claims[0].Devices[i].Runtime = dradriver.PreparedDevice{}.Runtime
		ck.Claims[0].Devices[i].CDIDevice = ""
	}
	if err := dradriver.WriteCheckpoint(filepath.Join(e.dataDir, dradriver.CheckpointFile), ck); err != nil {
		t.Fatal(err)
	}
	live := liveInstances(e.hw)
	creates := e.hw.Calls(fakehal.OpCreateGI)
	d = e.driver(t)
	e.claims.set(true) // the listing lags
	maintain(t, d)
	if got := liveInstances(e.hw); !slices.Equal(got, live) {
		t.Fatalf("live %v after the restart, want %v", got, live)
	}
	e.claims.set(true, a)
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := liveInstances(e.hw); !slices.Equal(got, live) || e.hw.Calls(fakehal.OpCreateGI) != creates {
		t.Errorf("live %v after the retry, want %v and nothing created", got, live)
	}
}

// TestRebootDropsCheckpoint: a checkpoint from another boot describes
// instances and containers that did not survive the reboot. Its claims
// are dropped with their CDI specs; a restart under the same boot keeps
// them.
func TestRebootDropsCheckpoint(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	a := allocate(t, d.Catalog(), profileClaim("uid-a", "1g.6gb", 1))
	e.claims.set(true, a)
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := d.Checkpoint().BootID; got != "boot-1" {
		t.Errorf("checkpoint boot ID %q, want boot-1", got)
	}
	if d = e.driver(t); len(d.Checkpoint().Claims) != 1 {
		t.Fatalf("restart in the same boot dropped the checkpoint: %+v", d.Checkpoint())
	}

	hw, err := fakehal.New(fakehal.Options{GPUs: []string{"NVIDIA A30"}}) // the reboot cleared MIG instances
	if err != nil {
		t.Fatal(err)
	}
	e.hw, e.boot = hw, "boot-2"
	d = e.driver(t)
	if ck := d.Checkpoint(); len(ck.Claims) != 0 || ck.BootID != "boot-2" {
		t.Errorf("after a reboot: %+v, want no claims under boot-2", ck)
	}
	if _, err := os.Stat(filepath.Join(e.cdiDir, "k8s.mig.dynmig.io-mig_uid-a.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CDI spec of a claim from the previous boot: %v, want removed", err)
	}
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Errorf("prepare after the reboot: %v", r.Err)
	}

	d2, err := dradriver.New(dradriver.Config{Node: testNode, Hardware: e.hw, Claims: e.claims, CDIDir: e.cdiDir, DataDir: e.dataDir,
		BootID: func() (string, error) { return " \n", nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Setup(context.Background()); !errors.Is(err, dradriver.ErrBootID) {
		t.Errorf("Setup with an empty boot ID: %v, want ErrBootID", err)
	}
}

// TestReallocatedUnderSameUID: a claim deallocated and allocated again
// under the same UID, to another device, while its earlier preparation is
// still checkpointed, keeps the earlier instance until the kubelet
// unprepares it, across a restart; another claim allocated the earlier
// device never adopts that instance.
func TestReallocatedUnderSameUID(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	d1 := deviceName(t, e.hw, 0, "1g.6gb", 0, 1)
	d2 := deviceName(t, e.hw, 0, "1g.6gb", 1, 1)
	a := claimFor("uid-a", d1)
	e.claims.set(true, a)
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	old := liveInstances(e.hw)

	again := claimFor("uid-a", d2)
	b := claimFor("uid-b", d1)
	e.claims.set(true, again, b)
	check := func(d *dradriver.Driver) {
		t.Helper()
		if r := prepareOne(t, d, again); !errors.Is(r.Err, dradriver.ErrReallocated) {
			t.Errorf("prepare of the re-allocated claim: %v, want ErrReallocated", r.Err)
		}
		if r := prepareOne(t, d, b); !isHeld(r.Err, "uid-a") {
			t.Errorf("prepare of b on a's earlier device: %v, want held by uid-a", r.Err)
		}
		maintain(t, d)
		if got := liveInstances(e.hw); !slices.Equal(got, old) {
			t.Errorf("live %v, want a's earlier %v", got, old)
		}
	}
	check(d)
	d = e.driver(t) // restart
	if st := d.Manager().Stats(); st.Adoptions != 1 || st.Destroys != 0 {
		t.Errorf("restart: adoptions %d, destroys %d; want 1, 0", st.Adoptions, st.Destroys)
	}
	check(d)

	if err := unprepareOne(t, d, a); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*resourceapi.ResourceClaim{again, b} {
		if r := prepareOne(t, d, c); r.Err != nil {
			t.Fatalf("prepare %s after the unprepare: %v", c.UID, r.Err)
		}
	}
	for _, l := range liveInstances(e.hw) {
		if l.MIGUUID == old[0].MIGUUID {
			t.Errorf("a's earlier instance %s was handed out again", l.MIGUUID)
		}
	}
}

// TestAdminAccess: a device allocated with admin access is never an
// exclusive holder: it creates and destroys nothing, exposes the parent
// GPU, does not keep an ordinary claim from being prepared on the same
// device, and withholds nothing.
func TestAdminAccess(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	dev := deviceName(t, e.hw, 0, "2g.12gb", 0, 2)
	admin := claimFor("uid-admin", dev)
	yes := true
	admin.Status.Allocation.Devices.Results[0].AdminAccess = &yes
	c := claimFor("uid-c", dev)
	e.claims.set(true, admin, c)

	r := prepareOne(t, d, admin)
	if r.Err != nil {
		t.Fatalf("prepare with admin access: %v", r.Err)
	}
	if got := liveInstances(e.hw); len(got) != 0 {
		t.Errorf("admin access created %v", got)
	}
	devs, err := e.hw.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if env := readCDIEnv(t, e.cdiDir, admin.UID)[r.Devices[0].CDIDeviceIDs[0]]; !slices.Contains(env, "NVIDIA_VISIBLE_DEVICES="+devs[0].UUID) {
		t.Errorf("admin access CDI env %v, want the parent GPU %s", env, devs[0].UUID)
	}
	if r := prepareOne(t, d, c); r.Err != nil {
		t.Fatalf("prepare beside admin access: %v", r.Err)
	}
	rep, err := d.Maintain(context.Background())
	if err != nil || !rep.Reconcile.Authorized {
		t.Errorf("maintain with admin access: authorised %t, %v; want authorised", rep.Reconcile.Authorized, err)
	}
	live := liveInstances(e.hw)
	if err := unprepareOne(t, d, admin); err != nil {
		t.Fatal(err)
	}
	if got := liveInstances(e.hw); len(got) != 1 || !slices.Equal(got, live) {
		t.Errorf("unprepare of admin access: live %v, want c's %v", got, live)
	}
}
