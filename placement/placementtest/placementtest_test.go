package placementtest_test

import (
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/placementtest"
)

// The module's own allocators pass the suite: the three policies (and the
// other fragmentation metrics) through the Selector, and the Ledger.
func TestSelectorPolicies(t *testing.T) {
	policies := []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.FragmentationAware{},
		placement.FragmentationAware{Metric: placement.InstanceCapacity}, placement.FragmentationAware{Metric: placement.FreePlacements}}
	for _, pol := range policies {
		t.Run(pol.String(), func(t *testing.T) {
			placementtest.Check(t, placementtest.Selector(placement.SelectorOptions{Policy: pol}), placementtest.Options{Tables: fakehal.Tables()})
		})
	}
}

func TestLedger(t *testing.T) {
	placementtest.Check(t, placementtest.Ledger(placement.LedgerOptions{}), placementtest.Options{Tables: fakehal.Tables()})
}

// Generated values are what the package promises: GPUs compile, held
// instances are published placements that do not overlap, requests are
// valid.
func TestGenerators(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := placementtest.CaseGen(placementtest.Options{Tables: fakehal.Tables()}).Draw(t, "case")
		if err := c.Request.Validate(); err != nil {
			t.Fatalf("invalid request %s: %v", placementtest.FormatRequest(&c.Request), err)
		}
		if _, err := c.Node.States(); err != nil {
			t.Fatalf("node does not compile: %v\n%s", err, c.Node)
		}
		for i := range c.Node.GPUs {
			g := &c.Node.GPUs[i]
			if g.UUID != placementtest.UUIDOf(i) || g.Index != i {
				t.Fatalf("GPU %d is %s index %d", i, g.UUID, g.Index)
			}
			for _, p := range g.Profiles {
				if _, err := capability.ParseProfileName(p.Name); err != nil {
					t.Fatalf("GPU %d: %v", i, err)
				}
			}
			var used placement.Occupancy
			for _, in := range c.Node.HeldOn(i) {
				p := g.Profile(in.Profile)
				if p == nil || !p.HasPlacement(in.Placement) || !used.Fits(in.Placement) {
					t.Fatalf("held %v is not reachable on\n%s", in, c.Node)
				}
				used = used.Take(in.Placement)
			}
		}
	})
}

// GridGPU covers every width it is asked for.
func TestGridGPUWidths(t *testing.T) {
	for _, w := range placementtest.GridWidths {
		rapid.Check(t, func(t *rapid.T) {
			g := placementtest.GridGPU(0, w).Draw(t, "gpu")
			if g.Width() != w {
				t.Fatalf("width %d, want %d\n%v", g.Width(), w, placementtest.Node{GPUs: []capability.GPU{g}})
			}
		})
	}
}

// The oracle agrees with itself on the witness it returns: a fitting
// verdict's witness passes the suite's checks as an allocator would.
func TestOracleWitnessIsValid(t *testing.T) {
	witness := placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
		v := placementtest.Oracle(n, r)
		if !v.Fits {
			return nil, &placement.UnschedulableError{Reason: v.Reason, Container: v.Container, Device: v.Device}
		}
		return v.Witness, nil
	})
	// The witness is not the smallest profile, so only multi-device pods.
	gen := placementtest.CaseGen(placementtest.Options{Tables: fakehal.Tables()})
	rapid.Check(t, func(t *rapid.T) {
		c := gen.Draw(t, "case")
		if c.Request.DeviceCount() < 2 {
			t.Skip("single device")
		}
		if err := placementtest.CheckCase(witness, c, placementtest.Options{Tables: fakehal.Tables()}); err != nil {
			t.Fatal(err)
		}
	})
}

// Each mutant breaks one property; the suite must catch every one.
func TestMutantsFail(t *testing.T) {
	base := placementtest.Selector(placement.SelectorOptions{})
	calls := 0
	mutants := map[string]placementtest.Allocator{
		"ignores held instances": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			empty := placementtest.Node{GPUs: n.GPUs}
			return base.Allocate(&empty, r)
		}),
		"unpublished placement": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			as, err := base.Allocate(n, r)
			for i := range as {
				if as[i].Placement.Start > 0 {
					as[i].Placement.Start--
				}
			}
			return as, err
		}),
		"largest profile": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			whole := *r
			whole.Containers = append([]placement.ContainerRequest(nil), r.Containers...)
			for i := range whole.Containers {
				if whole.Containers[i].Profile == "" {
					whole.Containers[i].Memory = placement.Memory{}
				}
			}
			as, err := base.Allocate(n, &whole)
			if err != nil {
				return base.Allocate(n, r)
			}
			return as, nil
		}),
		"wrong reason": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			as, err := base.Allocate(n, r)
			if errors.Is(err, placement.ErrFragmented) {
				return nil, &placement.UnschedulableError{Reason: placement.ErrCapacity, Container: -1, Device: -1}
			}
			return as, err
		}),
		"refuses multi-device pods": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			if r.DeviceCount() > 1 {
				return nil, &placement.UnschedulableError{Reason: placement.ErrFragmented, Container: -1, Device: -1}
			}
			return base.Allocate(n, r)
		}),
		"ignores constraints": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			free := placement.Request{Containers: r.Containers, Preference: r.Preference}
			return base.Allocate(n, &free)
		}),
		"ignores health": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			c := n.Clone()
			for i := range c.GPUs {
				c.GPUs[i].Unhealthy = false
			}
			return base.Allocate(&c, r)
		}),
		"not deterministic": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			calls++
			pol := placement.Policy(placement.FirstFit{})
			if calls%2 == 0 {
				pol = placement.V210{}
			}
			return placementtest.Selector(placement.SelectorOptions{Policy: pol}).Allocate(n, r)
		}),
		"mutates the node": placementtest.AllocatorFunc(func(n *placementtest.Node, r *placement.Request) ([]placement.Assignment, error) {
			as, err := base.Allocate(n, r)
			for _, a := range as {
				n.Held[a.GPU] = append(n.Held[a.GPU], placementtest.Instance{Profile: a.Profile, Placement: a.Placement})
			}
			return as, err
		}),
	}
	gen := placementtest.CaseGen(placementtest.Options{Tables: fakehal.Tables()})
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			for seed := range 2000 {
				c := gen.Example(seed)
				err := placementtest.CheckCase(m, c, placementtest.Options{Tables: fakehal.Tables()})
				if err != nil && !errors.Is(err, placementtest.ErrUndecided) {
					t.Logf("caught at seed %d: %v", seed, err)
					return
				}
			}
			t.Fatal("the suite passed a broken allocator")
		})
	}
}
