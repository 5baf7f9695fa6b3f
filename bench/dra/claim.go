package dra

import (
	"fmt"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// CandidateProfiles returns the profiles, by name, that can serve one device
// of c on the model's GPUs, in the order dynmig's selector tries them: the
// named profile alone when c.Profile is set, otherwise every profile whose
// memory covers the demand ([placement.Memory.On] on each GPU), ordered by
// [capability.CompareProfiles]. It is empty when none fits.
func (m *Model) CandidateProfiles(c placement.ContainerRequest) []string {
	if c.Profile != "" {
		for _, g := range m.grids {
			if g.Profile(c.Profile) != nil {
				return []string{c.Profile}
			}
		}
		return nil
	}
	var ps []capability.Profile
	for _, g := range m.grids {
		need := c.Memory.On(g)
		for _, p := range g.Profiles() {
			if p.MemoryMB >= need && !slices.ContainsFunc(ps, func(q capability.Profile) bool { return q.Name == p.Name }) {
				ps = append(ps, p)
			}
		}
	}
	capability.SortProfiles(ps)
	names := make([]string, len(ps))
	for i := range ps {
		names[i] = ps[i].Name
	}
	return names
}

// profileSelector is the CEL selector that picks one profile by attribute.
func profileSelector(profile string) []resourceapi.DeviceSelector {
	return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.attributes["` + DriverName + `"].profile == ` + strconv.Quote(profile),
	}}}
}

// Claim builds the ResourceClaim for one container's demand c (c.Devices
// devices, at least 1). With one candidate profile the claim has one request
// "mig" whose CEL selector names it; with several, the request is a
// prioritized list (firstAvailable) with one sub-request per candidate,
// smallest first, truncated to
// [resourceapi.FirstAvailableDeviceRequestMaxSize]. It fails, wrapping
// [placement.ErrNoProfile], when no profile fits.
func (m *Model) Claim(name string, c placement.ContainerRequest) (*resourceapi.ResourceClaim, error) {
	profiles := m.CandidateProfiles(c)
	if len(profiles) == 0 {
		return nil, fmt.Errorf("dra: claim %s: %w", name, placement.ErrNoProfile)
	}
	count := int64(max(c.Devices, 1))
	req := resourceapi.DeviceRequest{Name: "mig"}
	if len(profiles) == 1 {
		req.Exactly = &resourceapi.ExactDeviceRequest{
			DeviceClassName: DeviceClassName,
			Selectors:       profileSelector(profiles[0]),
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           count,
		}
	} else {
		profiles = profiles[:min(len(profiles), resourceapi.FirstAvailableDeviceRequestMaxSize)]
		for i, p := range profiles {
			req.FirstAvailable = append(req.FirstAvailable, resourceapi.DeviceSubRequest{
				Name:            "p" + strconv.Itoa(i),
				DeviceClassName: DeviceClassName,
				Selectors:       profileSelector(p),
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           count,
			})
		}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}, nil
}
