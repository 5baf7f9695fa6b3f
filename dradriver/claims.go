package dradriver

import (
	"context"
	"errors"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/realize"
	"github.com/dynmig/dynmig/reservation"
)

// ClaimSource lists the cluster's ResourceClaims. Only status.allocation
// is read from them: the scheduler writes it, a claim's creator cannot, so
// nothing a pod's or claim's creator writes decides which hardware a claim
// holds.
type ClaimSource interface {
	// Claims returns the listed claims and whether the listing is
	// complete (every claim that exists is in it). An incomplete listing
	// never authorises destroying anything. The caller must not modify
	// the claims.
	Claims() (claims []*resourceapi.ResourceClaim, complete bool)
}

// ClaimDevice is one device that a claim's allocation gives this node's
// pool of [DriverName].
type ClaimDevice struct {
	Request string // the allocation result's request, "<request>[/<subrequest>]"
	Device  string // device name in the pool
	// ContainerIndex is the position of the result's request (without
	// subrequest) among the claim's requests with results for this pool,
	// in result order; DeviceIndex is the device's position within that
	// request. Together with the claim UID they are the device's
	// realize.Owner.
	ContainerIndex int
	DeviceIndex    int
	Partition      Partition
	// AdminAccess is the result's adminAccess: the device is exposed to
	// the claim's containers for monitoring, never realized, held or
	// destroyed for it, and it conflicts with no other claim.
	AdminAccess bool
	// Err is the [*DeviceNameError] of a name that does not decode, or
	// the [*NotPublishedError] of a partition the node does not publish.
	// Such a device is never realized.
	Err error
}

// ClaimDevices returns the devices of claim's allocation that belong to
// the pool of this node and driver, in result order, and whether there is
// any. Results of other drivers or pools are not this node's.
func (c *Catalog) ClaimDevices(claim *resourceapi.ResourceClaim) ([]ClaimDevice, bool) {
	if claim == nil || claim.Status.Allocation == nil {
		return nil, false
	}
	var out []ClaimDevice
	requests := map[string]int{}
	perRequest := map[string]int{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName || r.Pool != c.node {
			continue
		}
		parent, _, _ := strings.Cut(r.Request, "/")
		ci, ok := requests[parent]
		if !ok {
			ci = len(requests)
			requests[parent] = ci
		}
		cd := ClaimDevice{Request: r.Request, Device: r.Device, ContainerIndex: ci, DeviceIndex: perRequest[parent],
			AdminAccess: r.AdminAccess != nil && *r.AdminAccess}
		perRequest[parent]++
		cd.Partition, _, cd.Err = c.Lookup(r.Device)
		out = append(out, cd)
	}
	return out, len(out) > 0
}

// listedHolder is the realize holder of a listed claim allocated to this
// node that the driver has not checkpointed. Devices with admin access
// are no one's, and devices whose names do not decode name no hardware:
// both are left out. Devices the node does not publish, and devices that
// overlap a device a checkpointed claim holds, are withheld (Untrusted:
// respected, never realized, in no conflict).
func listedHolder(claim *resourceapi.ResourceClaim, devs []ClaimDevice, ck Checkpoint) realize.Holder {
	h := realize.Holder{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name}
	for _, d := range devs {
		var dne *DeviceNameError
		if d.AdminAccess || errors.As(d.Err, &dne) {
			continue
		}
		untrusted := d.Err
		if untrusted == nil {
			if pc, pd, held := ck.Holds(d.Partition, h.UID); held {
				untrusted = &DeviceHeldError{Device: d.Device, Claim: pc.UID, Held: pd.Device}
			}
		}
		h.Devices = append(h.Devices, realize.Want{Allocation: allocationOf(d.ContainerIndex, d.DeviceIndex, d.Partition), Untrusted: untrusted})
	}
	return h
}

// checkpointedHolder is the realize holder of a checkpointed claim: its
// checkpointed devices without admin access, with their recorded runtime
// identities (none while PrepareStarted). It is never released: only the
// claim's unprepare destroys its instances.
func checkpointedHolder(pc *PreparedClaim) realize.Holder {
	h := realize.Holder{UID: pc.UID, Namespace: pc.Namespace, Name: pc.Name}
	for _, d := range pc.Devices {
		if d.AdminAccess {
			continue
		}
		a := allocationOf(d.ContainerIndex, d.DeviceIndex, d.Partition)
		if d.Runtime != (reservation.RuntimeIdentity{}) {
			a = a.WithRuntime(d.Runtime)
		}
		h.Devices = append(h.Devices, realize.Want{Allocation: a})
	}
	return h
}

func allocationOf(ci, di int, p Partition) reservation.Allocation {
	return reservation.Allocation{ContainerIndex: ci, DeviceIndex: di, GPUUUID: p.GPUUUID, Profile: p.Profile, Placement: p.Placement}
}

// Demand builds the realize demand of a claim listing and the checkpoint:
// one holder per checkpointed claim, from the checkpoint (what was
// prepared, whatever the listing now says of the claim), and one per
// listed claim allocated to this node's pool that is not checkpointed,
// from its allocation (see listedHolder). No holder is ever released: a
// checkpointed claim's instances are destroyed only by its unprepare,
// never because the API no longer shows it allocated here (its
// force-deleted pod's container may still hold the device). Placements
// come only from claim status (the allocator) and the checkpoint, so
// AdoptAtPlacement is set.
func (c *Catalog) Demand(claims []*resourceapi.ResourceClaim, complete bool, ck Checkpoint) realize.Demand {
	d := realize.Demand{Complete: complete, AdoptAtPlacement: true}
	for i := range ck.Claims {
		d.Holders = append(d.Holders, checkpointedHolder(&ck.Claims[i]))
	}
	for _, claim := range claims {
		if _, checkpointed := ck.Claim(string(claim.UID)); checkpointed {
			continue
		}
		devs, ok := c.ClaimDevices(claim)
		if !ok {
			continue
		}
		d.Holders = append(d.Holders, listedHolder(claim, devs, ck))
	}
	return d
}

// Used returns, per GPU UUID, the slots that the listing's allocations
// and the checkpoint's prepared devices take (admin access takes none):
// what the allocator already counts as consumed, for [NewCatalog]'s order.
func (c *Catalog) Used(claims []*resourceapi.ResourceClaim, ck Checkpoint) map[string]placement.Occupancy {
	used := map[string]placement.Occupancy{}
	for _, claim := range claims {
		devs, _ := c.ClaimDevices(claim)
		for _, d := range devs {
			if d.Err == nil && !d.AdminAccess {
				used[d.Partition.GPUUUID] = used[d.Partition.GPUUUID].Take(d.Partition.Placement)
			}
		}
	}
	for _, pc := range ck.Claims {
		for _, d := range pc.Devices {
			if !d.AdminAccess {
				used[d.Partition.GPUUUID] = used[d.Partition.GPUUUID].Take(d.Partition.Placement)
			}
		}
	}
	return used
}

// Retained returns the partitions the listing's allocations (admin
// access aside) and the checkpoint's devices name, whether published or
// not: what must stay counted until released ([CatalogOptions.Retain]).
func (c *Catalog) Retained(claims []*resourceapi.ResourceClaim, ck Checkpoint) []Partition {
	var out []Partition
	for _, claim := range claims {
		devs, _ := c.ClaimDevices(claim)
		for _, d := range devs {
			var dne *DeviceNameError
			if !d.AdminAccess && !errors.As(d.Err, &dne) {
				out = append(out, d.Partition)
			}
		}
	}
	for _, pc := range ck.Claims {
		for _, d := range pc.Devices {
			if !d.AdminAccess {
				out = append(out, d.Partition)
			}
		}
	}
	return out
}

// informerSource is a [ClaimSource] over a ResourceClaim informer of the
// whole cluster: a claim's allocation names the node only in its results'
// pools, which no field selector reaches.
type informerSource struct {
	inf cache.SharedIndexInformer
}

func newInformerSource(client kubernetes.Interface, onChange func()) *informerSource {
	inf := resourceinformers.NewResourceClaimInformer(client, metav1.NamespaceAll, 0, cache.Indexers{})
	h := func() { onChange() }
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { h() },
		UpdateFunc: func(any, any) { h() },
		DeleteFunc: func(any) { h() },
	})
	return &informerSource{inf: inf}
}

// run runs the informer until ctx is done; it returns when the informer
// has stopped.
func (s *informerSource) run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { s.inf.RunWithContext(ctx) })
}

func (s *informerSource) Claims() ([]*resourceapi.ResourceClaim, bool) {
	synced := s.inf.HasSynced()
	items := s.inf.GetStore().List()
	out := make([]*resourceapi.ResourceClaim, 0, len(items))
	for _, it := range items {
		if c, ok := it.(*resourceapi.ResourceClaim); ok {
			out = append(out, c)
		}
	}
	return out, synced
}
