package dradriver_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/dradriver"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/realize"
)

// prepareOne prepares one claim and returns its result.
func prepareOne(t *testing.T, d *dradriver.Driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatalf("PrepareResourceClaims: %v", err)
	}
	r, ok := res[c.UID]
	if !ok || len(res) != 1 {
		t.Fatalf("results = %v, want exactly one for %s", res, c.UID)
	}
	return r
}

func unprepareOne(t *testing.T, d *dradriver.Driver, c *resourceapi.ResourceClaim) error {
	t.Helper()
	obj := kubeletplugin.NamespacedObject{UID: c.UID}
	obj.Namespace, obj.Name = c.Namespace, c.Name
	res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{obj})
	if err != nil {
		t.Fatalf("UnprepareResourceClaims: %v", err)
	}
	e, ok := res[c.UID]
	if !ok || len(res) != 1 {
		t.Fatalf("results = %v, want exactly one for %s", res, c.UID)
	}
	return e
}

// instances returns the live (placement, MIG UUID) of every instance.
type live struct {
	GPU       int
	Placement capability.Placement
	MIGUUID   string
}

func liveInstances(hw *fakehal.Node) []live {
	var out []live
	for _, in := range hw.Snapshot() {
		l := live{GPU: in.GPU, Placement: in.Placement}
		if len(in.ComputeInstances) == 1 {
			l.MIGUUID = in.ComputeInstances[0].MIGUUID
		}
		out = append(out, l)
	}
	return out
}

// readCDIEnv returns, per CDI device name in the claim's spec file, its env.
func readCDIEnv(t *testing.T, dir string, uid types.UID) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "k8s.mig.dynmig.io-mig_"+string(uid)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Kind != dradriver.CDIKind {
		t.Errorf("CDI kind = %q, want %q", spec.Kind, dradriver.CDIKind)
	}
	out := map[string][]string{}
	for _, d := range spec.Devices {
		out[dradriver.CDIKind+"="+d.Name] = d.ContainerEdits.Env
	}
	return out
}

// TestAllocatorThenPrepare publishes a fake A30 node, lets the real
// structured allocator allocate claims on the published slices until the
// GPU is full, and prepares each: every claim gets exactly its allocated
// placement on the hardware, and its CDI device exposes that MIG device.
func TestAllocatorThenPrepare(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	var allocated []*resourceapi.ResourceClaim
	for i, profile := range []string{"2g.12gb", "1g.6gb", "1g.6gb"} {
		c := allocate(t, d.Catalog(), profileClaim("uid-"+string(rune('a'+i)), profile, 1), allocated...)
		if c == nil {
			t.Fatalf("claim %d (%s): allocator found no device", i, profile)
		}
		allocated = append(allocated, c)
		e.claims.set(true, allocated...)
		r := prepareOne(t, d, c)
		if r.Err != nil {
			t.Fatalf("claim %d: prepare: %v", i, r.Err)
		}
		res := c.Status.Allocation.Devices.Results[0]
		if len(r.Devices) != 1 || r.Devices[0].DeviceName != res.Device || r.Devices[0].PoolName != testNode ||
			!slices.Equal(r.Devices[0].Requests, []string{"gpu"}) || len(r.Devices[0].CDIDeviceIDs) != 1 {
			t.Fatalf("claim %d: devices = %+v, want one for %s", i, r.Devices, res.Device)
		}
		p, err := dradriver.ParseDeviceName(res.Device)
		if err != nil || p.Profile != profile {
			t.Fatalf("claim %d: allocated %s (%v), want a %s device", i, res.Device, err, profile)
		}
		env := readCDIEnv(t, e.cdiDir, c.UID)[r.Devices[0].CDIDeviceIDs[0]]
		found := false
		for _, l := range liveInstances(e.hw) {
			if l.Placement == p.Placement {
				found = true
				if want := []string{"NVIDIA_VISIBLE_DEVICES=" + l.MIGUUID}; !slices.Equal(env, want) {
					t.Errorf("claim %d: CDI env = %v, want %v", i, env, want)
				}
			}
		}
		if !found {
			t.Errorf("claim %d: no instance at the allocated placement %v; live %v", i, p.Placement, liveInstances(e.hw))
		}
	}
	if got := len(liveInstances(e.hw)); got != 3 {
		t.Errorf("live instances = %d, want 3", got)
	}
	// The GPU is full: the allocator agrees with the hardware.
	if c := allocate(t, d.Catalog(), profileClaim("uid-z", "1g.6gb", 1), allocated...); c != nil {
		t.Errorf("allocator placed %v on a full GPU", c.Status.Allocation.Devices.Results)
	}
	if got := len(d.Checkpoint().Claims); got != 3 {
		t.Errorf("checkpointed claims = %d, want 3", got)
	}
}

// TestPrepareIdempotent: preparing again returns the same CDI device and
// MIG device and creates nothing.
func TestPrepareIdempotent(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	c := allocate(t, d.Catalog(), profileClaim("uid-1", "2g.12gb", 1))
	e.claims.set(true, c)
	first := prepareOne(t, d, c)
	creates := e.hw.Calls(fakehal.OpCreateGI)
	again := prepareOne(t, d, c)
	if first.Err != nil || again.Err != nil {
		t.Fatalf("errors %v, %v", first.Err, again.Err)
	}
	if !slices.EqualFunc(first.Devices, again.Devices, func(a, b kubeletplugin.Device) bool {
		return a.DeviceName == b.DeviceName && slices.Equal(a.CDIDeviceIDs, b.CDIDeviceIDs)
	}) {
		t.Errorf("devices %+v, then %+v", first.Devices, again.Devices)
	}
	if got := e.hw.Calls(fakehal.OpCreateGI); got != creates {
		t.Errorf("creates = %d after preparing again, want %d", got, creates)
	}
}

// TestRestartAdoptsPreparedClaims: a new driver instance on the same node
// (same data directory) adopts the prepared claims' instances, destroys
// nothing and hands out the same MIG devices.
func TestRestartAdoptsPreparedClaims(t *testing.T) {
	for _, tc := range []struct {
		name           string
		loseCheckpoint bool
	}{
		{name: "checkpoint"},
		{name: "checkpoint lost, adopted at the allocated placement", loseCheckpoint: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
			d := e.driver(t)
			a := allocate(t, d.Catalog(), profileClaim("uid-a", "1g.6gb", 2))
			e.claims.set(true, a)
			b := allocate(t, d.Catalog(), profileClaim("uid-b", "2g.12gb", 1), a)
			e.claims.set(true, a, b)
			before := map[types.UID][]string{}
			for _, c := range []*resourceapi.ResourceClaim{a, b} {
				r := prepareOne(t, d, c)
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				before[c.UID] = r.Devices[0].CDIDeviceIDs
			}
			liveBefore := liveInstances(e.hw)
			if tc.loseCheckpoint {
				if err := os.Remove(filepath.Join(e.dataDir, dradriver.CheckpointFile)); err != nil {
					t.Fatal(err)
				}
			}
			creates, destroys := e.hw.Calls(fakehal.OpCreateGI), e.hw.Calls(fakehal.OpDestroyGI)

			d2 := e.driver(t) // restart
			if st := d2.Manager().Stats(); st.Adoptions != 3 || st.Destroys != 0 {
				t.Errorf("after restart: adoptions %d, destroys %d; want 3, 0", st.Adoptions, st.Destroys)
			}
			for _, c := range []*resourceapi.ResourceClaim{a, b} {
				r := prepareOne(t, d2, c)
				if r.Err != nil {
					t.Fatalf("prepare after restart: %v", r.Err)
				}
				if !slices.Equal(r.Devices[0].CDIDeviceIDs, before[c.UID]) {
					t.Errorf("claim %s: CDI %v after restart, want %v", c.UID, r.Devices[0].CDIDeviceIDs, before[c.UID])
				}
			}
			if got := liveInstances(e.hw); !slices.Equal(got, liveBefore) {
				t.Errorf("live instances %v after restart, want %v", got, liveBefore)
			}
			if c, dd := e.hw.Calls(fakehal.OpCreateGI), e.hw.Calls(fakehal.OpDestroyGI); c != creates || dd != destroys {
				t.Errorf("creates, destroys = %d, %d after restart; want %d, %d", c, dd, creates, destroys)
			}
		})
	}
}

// TestUnprepare: unprepare destroys exactly the claim's instances, removes
// its CDI spec and checkpoint entry, and is idempotent; after a restart it
// works from the checkpoint for a claim gone from the API.
func TestUnprepare(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	a := allocate(t, d.Catalog(), profileClaim("uid-a", "1g.6gb", 1))
	b := allocate(t, d.Catalog(), profileClaim("uid-b", "1g.6gb", 1), a)
	e.claims.set(true, a, b)
	for _, c := range []*resourceapi.ResourceClaim{a, b} {
		if r := prepareOne(t, d, c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	for i := range 2 {
		if err := unprepareOne(t, d, a); err != nil {
			t.Fatalf("unprepare #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.cdiDir, "k8s.mig.dynmig.io-mig_uid-a.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CDI spec of the unprepared claim: stat err %v, want not exist", err)
	}
	if got := len(liveInstances(e.hw)); got != 1 {
		t.Errorf("live instances = %d, want 1 (b's)", got)
	}
	if _, ok := d.Checkpoint().Claim("uid-a"); ok {
		t.Error("unprepared claim still checkpointed")
	}

	// b is deleted from the API; a restarted driver unprepares it from
	// its checkpoint (kubelet only passes UID, namespace and name).
	e.claims.set(true)
	d2 := e.driver(t)
	if err := unprepareOne(t, d2, b); err != nil {
		t.Fatalf("unprepare after restart: %v", err)
	}
	if got := liveInstances(e.hw); len(got) != 0 {
		t.Errorf("live instances %v, want none", got)
	}
	if got := len(d2.Checkpoint().Claims); got != 0 {
		t.Errorf("checkpointed claims = %d, want 0", got)
	}
	// Never prepared: nothing to do, no error.
	if err := unprepareOne(t, d2, claimFor("uid-never")); err != nil {
		t.Errorf("unprepare of an unknown claim: %v", err)
	}
}

// TestUnprepareInUseKeepsInstance: an instance with a process is not
// destroyed; the claim stays checkpointed and the error asks for a retry.
func TestUnprepareInUseKeepsInstance(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	a := allocate(t, d.Catalog(), profileClaim("uid-a", "4g.24gb", 1))
	e.claims.set(true, a)
	if r := prepareOne(t, d, a); r.Err != nil {
		t.Fatal(r.Err)
	}
	l := liveInstances(e.hw)
	pid, err := e.hw.StartProcess(0, l[0].MIGUUID)
	if err != nil {
		t.Fatal(err)
	}
	if err := unprepareOne(t, d, a); !errors.Is(err, realize.ErrInUse) {
		t.Errorf("unprepare with a process: %v, want ErrInUse", err)
	}
	if got := liveInstances(e.hw); !slices.Equal(got, l) {
		t.Errorf("live %v, want %v kept", got, l)
	}
	if _, ok := d.Checkpoint().Claim("uid-a"); !ok {
		t.Error("claim dropped from the checkpoint while its instance is kept")
	}
	if err := e.hw.StopProcess(pid); err != nil {
		t.Fatal(err)
	}
	if err := unprepareOne(t, d, a); err != nil {
		t.Errorf("retry: %v", err)
	}
}

// TestWithheldListings: conflicting claims and incomplete listings never
// lead to destruction by maintenance, and a claim's unprepare depends only
// on its own checkpoint and hardware state, never on conflicts elsewhere
// on the node or on the listing's completeness. Of two claims allocated
// overlapping devices, the first prepared holds them and the other is
// refused until it is unprepared.
func TestWithheldListings(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	kept := allocate(t, d.Catalog(), profileClaim("uid-kept", "1g.6gb", 1))
	e.claims.set(true, kept)
	if r := prepareOne(t, d, kept); r.Err != nil {
		t.Fatal(r.Err)
	}
	keptLive := liveInstances(e.hw)

	// Two claims overlap on slots [2,4), and kept's claim is gone from
	// the API: the conflict withholds maintenance's authorisation.
	x := claimFor("uid-x", deviceName(t, e.hw, 0, "2g.12gb", 2, 2))
	y := claimFor("uid-y", deviceName(t, e.hw, 0, "1g.6gb", 3, 1))
	e.claims.set(true, x, y)
	rep, err := d.Maintain(context.Background())
	if err != nil || rep.Reconcile.Authorized {
		t.Errorf("maintain beside conflicting claims: authorised %t, %v; want not authorised", rep.Reconcile.Authorized, err)
	}
	if got := liveInstances(e.hw); !slices.Equal(got, keptLive) {
		t.Errorf("conflicting listing: live %v, want %v untouched", got, keptLive)
	}
	// The conflict between x and y does not hold up kept's unprepare.
	if err := unprepareOne(t, d, kept); err != nil {
		t.Errorf("unprepare beside a conflicting listing: %v", err)
	}
	if got := liveInstances(e.hw); len(got) != 0 {
		t.Errorf("live %v after unprepare, want none", got)
	}
	// x is prepared first and holds [2,4); y is refused while it does.
	if r := prepareOne(t, d, x); r.Err != nil {
		t.Errorf("prepare x: %v", r.Err)
	}
	r := prepareOne(t, d, y)
	var held *dradriver.DeviceHeldError
	if !errors.As(r.Err, &held) || !errors.Is(r.Err, dradriver.ErrDeviceHeld) || held.Claim != "uid-x" {
		t.Errorf("prepare y: %v, want a *DeviceHeldError naming uid-x", r.Err)
	}
	if got := len(liveInstances(e.hw)); got != 1 {
		t.Errorf("live instances = %d, want x's", got)
	}
	if err := unprepareOne(t, d, x); err != nil {
		t.Fatal(err)
	}

	// An incomplete listing destroys nothing by maintenance, and does not
	// hold up an unprepare either.
	other := allocate(t, d.Catalog(), profileClaim("uid-other", "2g.12gb", 1))
	e.claims.set(true, other)
	if r := prepareOne(t, d, other); r.Err != nil {
		t.Fatal(r.Err)
	}
	otherLive := liveInstances(e.hw)
	e.claims.set(false)
	if _, err := d.Maintain(context.Background()); err != nil {
		t.Logf("maintain: %v", err)
	}
	if got := liveInstances(e.hw); !slices.Equal(got, otherLive) {
		t.Errorf("incomplete listing: live %v, want %v untouched", got, otherLive)
	}
	if err := unprepareOne(t, d, other); err != nil {
		t.Errorf("unprepare under an incomplete listing: %v", err)
	}
	if got := liveInstances(e.hw); len(got) != 0 {
		t.Errorf("live %v, want none", got)
	}
}

// TestPrepareRefusesUntrusted: only allocations of this driver and pool
// whose names decode to a published partition are realized.
func TestPrepareRefusesUntrusted(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	d := e.driver(t)
	otherPool := claimFor("uid-pool", deviceName(t, e.hw, 0, "1g.6gb", 0, 1))
	otherPool.Status.Allocation.Devices.Results[0].Pool = "node-b"
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  error
	}{
		{name: "malformed name", claim: claimFor("uid-bad", "gpu-0-1g-6gb-0"), want: dradriver.ErrDeviceName},
		{name: "profile not allowlisted", claim: claimFor("uid-me", deviceName(t, e.hw, 0, "1g.6gb+me", 0, 1)), want: dradriver.ErrNotPublished},
		{name: "placement not in the table", claim: claimFor("uid-pl", deviceName(t, e.hw, 0, "2g.12gb", 1, 2)), want: dradriver.ErrNotPublished},
		{name: "unknown GPU", claim: claimFor("uid-gpu", "mig-00000000-0000-4000-8000-000000000000-1g6gb-0-1"), want: dradriver.ErrNotPublished},
		{name: "another node's pool", claim: otherPool, want: dradriver.ErrNotAllocated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.claims.set(true, tc.claim)
			r := prepareOne(t, d, tc.claim)
			if !errors.Is(r.Err, tc.want) {
				t.Errorf("prepare: %v, want %v", r.Err, tc.want)
			}
			var ce *dradriver.ClaimError
			if !errors.As(r.Err, &ce) {
				t.Errorf("error %T is not a *ClaimError", r.Err)
			}
			if got := liveInstances(e.hw); len(got) != 0 {
				t.Errorf("live %v, want none", got)
			}
		})
	}
}

// TestUnhealthyGPU: an unhealthy GPU publishes no devices, and a claim
// that would need a new instance there is refused; a prepared one is
// handed out again.
func TestUnhealthyGPU(t *testing.T) {
	e := newEnv(t, "NVIDIA A30", "NVIDIA A30")
	d := e.driver(t)
	prepared := claimFor("uid-p", deviceName(t, e.hw, 1, "1g.6gb", 0, 1))
	fresh := claimFor("uid-f", deviceName(t, e.hw, 1, "1g.6gb", 1, 1))
	e.claims.set(true, prepared, fresh)
	if r := prepareOne(t, d, prepared); r.Err != nil {
		t.Fatal(r.Err)
	}
	d.ApplyHealth(realize.HealthEvent{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Cause: realize.CauseXid, Xid: 79})
	for _, dev := range d.Catalog().Devices() {
		if dev.GPU == 1 {
			t.Fatalf("unhealthy GPU 1 publishes %s", dev.Name)
		}
	}
	if r := prepareOne(t, d, fresh); !errors.Is(r.Err, dradriver.ErrUnhealthyGPU) {
		t.Errorf("prepare on an unhealthy GPU: %v, want ErrUnhealthyGPU", r.Err)
	}
	if r := prepareOne(t, d, prepared); r.Err != nil {
		t.Errorf("prepared claim on an unhealthy GPU: %v", r.Err)
	}
	d.ApplyHealth(realize.HealthEvent{GPU: 1, GI: realize.NoInstance, CI: realize.NoInstance, Healthy: true, Cause: realize.CauseRecovered})
	if r := prepareOne(t, d, fresh); r.Err != nil {
		t.Errorf("prepare after recovery: %v", r.Err)
	}
}

// TestCorruptCheckpointRefusesSetup: a driver that cannot read its
// checkpoint does not start (it would forget prepared claims).
func TestCorruptCheckpointRefusesSetup(t *testing.T) {
	e := newEnv(t, "NVIDIA A30")
	if err := os.WriteFile(filepath.Join(e.dataDir, dradriver.CheckpointFile), []byte(`{"version":1,"claims":[{"uid":""}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := dradriver.New(dradriver.Config{Node: testNode, Hardware: e.hw, Claims: e.claims, CDIDir: e.cdiDir, DataDir: e.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Setup(context.Background())
	var ce *dradriver.CheckpointError
	if !errors.Is(err, dradriver.ErrCheckpoint) || !errors.As(err, &ce) || ce.Claim != 0 {
		t.Errorf("Setup = %v, want a *CheckpointError for claims[0]", err)
	}
}
