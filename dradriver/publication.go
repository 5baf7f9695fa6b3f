package dradriver

import (
	"context"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// rebuild recomputes the catalog from the GPUs, their health, the claim
// listing and the checkpoint, and signals a republish.
func (d *Driver) rebuild() {
	d.build()
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// build rebuilds the catalog from the current GPUs, health, claims and
// checkpoint. Builds are serialised, so that one that read older state
// never replaces a newer catalog.
func (d *Driver) build() {
	d.buildMu.Lock()
	defer d.buildMu.Unlock()
	claims, _ := d.claims()
	d.mu.Lock()
	gpus := slices.Clone(d.gpus)
	for i := range gpus {
		if !d.health.GPUHealthy(gpus[i].Index) {
			gpus[i].Unhealthy = true
		}
	}
	ck, full := d.ck, d.full
	d.mu.Unlock()
	// Used and Retained decode the allocations against the same GPUs and
	// policy; decoding does not depend on the order, so an unordered
	// catalog serves.
	dec, err := NewCatalogWith(d.cfg.Node, gpus, CatalogOptions{Full: full})
	if err != nil {
		d.log.Error("catalog", "err", err)
		return
	}
	cat, err := NewCatalogWith(d.cfg.Node, gpus, CatalogOptions{Used: dec.Used(claims, ck), Full: full, Retain: dec.Retained(claims, ck)})
	if err != nil {
		d.log.Error("catalog", "err", err)
		return
	}
	for _, f := range cat.Findings() {
		d.log.Info("publication finding", "finding", f)
	}
	d.mu.Lock()
	d.cat = cat
	d.mu.Unlock()
}

// Catalog returns the current publication, nil before Setup.
func (d *Driver) Catalog() *Catalog {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cat
}

// signal asks Run to rebuild and republish.
func (d *Driver) signal() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// rebuildAndPublish is Run's reaction to a change: the order of devices
// depends on the taken slots, so a new allocation reorders its GPU.
func (d *Driver) rebuildAndPublish(ctx context.Context) {
	// build, not rebuild: no signal of its own, so a quiet system stays
	// quiet, while a change signalled meanwhile still gets its turn.
	d.build()
	d.pubMu.Lock()
	pub := d.publisher
	d.pubMu.Unlock()
	cat := d.Catalog()
	if pub == nil || cat == nil {
		return
	}
	if err := pub(ctx, d.Resources()); err != nil {
		d.log.Error("publish ResourceSlices", "err", err)
	}
}

// Resources returns the publication Run hands to the kubelet plugin: the
// catalog's ([Catalog.Resources]) with the prepared devices that a health
// failure hits tainted, retained ones ([PublishedDevice.Retained])
// included. A device on an unhealthy or unmonitored GPU (whose free
// devices the catalog withholds) is published again, tainted, in a slice
// of its own, so that the taint reaches the pods using it; a failed MIG
// device on a healthy GPU, and a retained device, which the catalog
// publishes whatever its GPU's health, are tainted where they are
// published. The effect
// is NoExecute when the GPU is lost (Xid 79, the driver reports it
// unavailable or needing a reset, or an NVML wait failed: the kube
// controller then evicts the pods that do not tolerate it), NoSchedule
// otherwise. Before Setup it is empty.
func (d *Driver) Resources() resourceslice.DriverResources {
	cat := d.Catalog()
	if cat == nil {
		return resourceslice.DriverResources{}
	}
	res := cat.Resources()
	ck := d.Checkpoint()
	taints := map[string]resourceapi.DeviceTaint{}
	var extra []PublishedDevice
	d.mu.Lock()
	for _, pc := range ck.Claims {
		for _, pd := range pc.Devices {
			if _, seen := taints[pd.Device]; seen {
				continue
			}
			// A retained device (its profile left the allowlist) is
			// published whatever its GPU's health, and gets every taint
			// a published device gets.
			_, g, err := cat.Lookup(pd.Device)
			retained := err != nil && cat.isRetained(pd.Device)
			if err != nil && !retained {
				continue // not published: nothing to taint
			}
			t, bad := d.taint(g.Index, pd.Runtime)
			if !bad {
				continue
			}
			taints[pd.Device] = t
			if !retained && !d.health.GPUHealthy(g.Index) {
				extra = append(extra, PublishedDevice{Name: pd.Device, Partition: pd.Partition, GPU: g.Index})
			}
		}
	}
	d.mu.Unlock()
	if len(taints) == 0 {
		return res
	}
	pool := res.Pools[d.cfg.Node]
	for si := range pool.Slices {
		for di := range pool.Slices[si].Devices {
			dev := &pool.Slices[si].Devices[di]
			if t, ok := taints[dev.Name]; ok {
				dev.Taints = append(dev.Taints, t)
			}
		}
	}
	slices.SortFunc(extra, func(a, b PublishedDevice) int { return strings.Compare(a.Name, b.Name) })
	for i, pd := range extra {
		if i%resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures == 0 {
			pool.Slices = append(pool.Slices, resourceslice.Slice{})
		}
		dev := device(cat.gpus[cat.byUUID[pd.Partition.GPUUUID]], pd)
		dev.Taints = []resourceapi.DeviceTaint{taints[pd.Name]}
		s := &pool.Slices[len(pool.Slices)-1]
		s.Devices = append(s.Devices, dev)
	}
	res.Pools[d.cfg.Node] = pool
	return res
}
