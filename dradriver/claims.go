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
		cd := ClaimDevice{Request: r.Request, Device: r.Device, ContainerIndex: ci, DeviceIndex: perRequest[parent]}
		perRequest[parent]++
		cd.Partition, _, cd.Err = c.Lookup(r.Device)
		out = append(out, cd)
	}
	return out, len(out) > 0
}

// holderOf is the realize holder of a listed claim allocated to this
// node. Devices whose names do not decode name no hardware and are left
// out; devices the node does not publish are withheld (Untrusted:
// respected, never realized). A device whose checkpointed partition
// equals its allocation carries the checkpointed runtime identity.
func holderOf(claim *resourceapi.ResourceClaim, devs []ClaimDevice, prepared *PreparedClaim) realize.Holder {
	h := realize.Holder{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name}
	for _, d := range devs {
		var dne *DeviceNameError
		if errors.As(d.Err, &dne) {
			continue
		}
		a := allocationOf(d.ContainerIndex, d.DeviceIndex, d.Partition)
		if prepared != nil {
			for _, pd := range prepared.Devices {
				if pd.ContainerIndex == d.ContainerIndex && pd.DeviceIndex == d.DeviceIndex && pd.Partition == d.Partition {
					a = a.WithRuntime(pd.Runtime)
				}
			}
		}
		h.Devices = append(h.Devices, realize.Want{Allocation: a, Untrusted: d.Err})
	}
	return h
}

// releasedHolder is the holder of a checkpointed claim that is no longer
// allocated to this node: released, with its recorded identities, so that
// its instances are reclaimed and never handed to another claim.
func releasedHolder(pc *PreparedClaim) realize.Holder {
	h := realize.Holder{UID: pc.UID, Namespace: pc.Namespace, Name: pc.Name, Released: true}
	for _, d := range pc.Devices {
		h.Devices = append(h.Devices, realize.Want{Allocation: allocationOf(d.ContainerIndex, d.DeviceIndex, d.Partition).WithRuntime(d.Runtime)})
	}
	return h
}

func allocationOf(ci, di int, p Partition) reservation.Allocation {
	return reservation.Allocation{ContainerIndex: ci, DeviceIndex: di, GPUUUID: p.GPUUUID, Profile: p.Profile, Placement: p.Placement}
}

// Demand builds the realize demand of a claim listing: one holder per
// claim allocated to this node's pool (override, when not nil, replaces
// the listed claim with its UID or is added), plus one holder per
// checkpointed claim the listing lacks. Such a claim is released only when
// gone, if not nil, confirms it (the API server no longer has it allocated
// here); otherwise it keeps its devices, since a lagging listing may not
// show a claim the kubelet has just had prepared. A nil gone releases
// every checkpointed claim the listing lacks. Placements come only from
// claim status (the allocator), so AdoptAtPlacement is set.
func (c *Catalog) Demand(claims []*resourceapi.ResourceClaim, complete bool, ck Checkpoint, override *resourceapi.ResourceClaim, gone func(uid string) bool) realize.Demand {
	d := realize.Demand{Complete: complete, AdoptAtPlacement: true}
	listed := map[string]bool{}
	add := func(claim *resourceapi.ResourceClaim) {
		devs, ok := c.ClaimDevices(claim)
		if !ok {
			return
		}
		prepared, _ := ck.Claim(string(claim.UID))
		d.Holders = append(d.Holders, holderOf(claim, devs, prepared))
		listed[string(claim.UID)] = true
	}
	for _, claim := range claims {
		if override != nil && claim.UID == override.UID {
			continue
		}
		add(claim)
	}
	if override != nil {
		add(override)
	}
	for i := range ck.Claims {
		if listed[ck.Claims[i].UID] {
			continue
		}
		h := releasedHolder(&ck.Claims[i])
		if gone != nil && !gone(h.UID) {
			h.Released = false
		}
		d.Holders = append(d.Holders, h)
	}
	return d
}

// Unlisted returns the checkpointed claims that claims lacks.
func (c *Catalog) Unlisted(claims []*resourceapi.ResourceClaim, ck Checkpoint) []PreparedClaim {
	listed := map[string]bool{}
	for _, claim := range claims {
		if _, ok := c.ClaimDevices(claim); ok {
			listed[string(claim.UID)] = true
		}
	}
	var out []PreparedClaim
	for _, pc := range ck.Claims {
		if !listed[pc.UID] {
			out = append(out, pc)
		}
	}
	return out
}

// Used returns, per GPU UUID, the slots that the listing's allocations
// and the checkpoint's prepared devices take: what the allocator already
// counts as consumed, for [NewCatalog]'s order.
func (c *Catalog) Used(claims []*resourceapi.ResourceClaim, ck Checkpoint) map[string]placement.Occupancy {
	used := map[string]placement.Occupancy{}
	for _, claim := range claims {
		devs, _ := c.ClaimDevices(claim)
		for _, d := range devs {
			if d.Err == nil {
				used[d.Partition.GPUUUID] = used[d.Partition.GPUUUID].Take(d.Partition.Placement)
			}
		}
	}
	for _, pc := range ck.Claims {
		for _, d := range pc.Devices {
			used[d.Partition.GPUUUID] = used[d.Partition.GPUUUID].Take(d.Partition.Placement)
		}
	}
	return used
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
