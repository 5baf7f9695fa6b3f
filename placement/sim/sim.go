package sim

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"
	"text/tabwriter"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// Result is what one policy did with one trace.
type Result struct {
	Policy     string `json:"policy"`
	Arrivals   int    `json:"arrivals"`
	Accepted   int    `json:"accepted"`
	Capacity   int    `json:"rejectedCapacity"`      // rejected: not enough free slots
	Fragmented int    `json:"rejectedFragmentation"` // rejected: free slots, no legal placement
	NoProfile  int    `json:"rejectedNoProfile"`     // rejected: no profile large enough
	Other      int    `json:"rejectedOther"`         // rejected: search bound or constraints
	// Utilisation is the time-weighted mean share of the GPUs' slots taken
	// between the first and last event, in [0,1] (the mean over events when
	// the trace has no duration).
	Utilisation float64 `json:"meanSlotUtilisation"`
}

// Rejected returns the arrivals that were not accepted.
func (r Result) Rejected() int { return r.Arrivals - r.Accepted }

// Run replays evs on gpus with policy pol (nil: the default) and reports the
// outcome. The GPUs start empty. It fails with a [*TraceError] for an
// invalid trace and a *placement.GridError for unusable GPUs.
func Run(gpus []capability.GPU, evs []Event, pol placement.Policy) (Result, error) {
	if err := Validate(evs); err != nil {
		return Result{}, err
	}
	st := make([]placement.GPUState, len(gpus))
	var total int
	for i := range gpus {
		g, err := placement.NewGrid(&gpus[i])
		if err != nil {
			return Result{}, err
		}
		st[i].Grid = g
		total += int(g.Width())
	}
	sel := placement.NewSelector(placement.SelectorOptions{Policy: pol})
	res := Result{Policy: sel.Policy().String()}
	held := map[string][]placement.Assignment{}
	var req placement.Request
	req.Containers = make([]placement.ContainerRequest, 1)
	taken := 0
	var area, sum float64
	for i := range evs {
		ev := &evs[i]
		if i > 0 {
			area += (ev.T - evs[i-1].T) * float64(taken)
		}
		switch ev.Op {
		case Arrive:
			res.Arrivals++
			req.Containers[0] = containerOf(ev)
			as, err := sel.Select(st, &req, nil)
			if err != nil {
				res.count(err)
				break
			}
			res.Accepted++
			held[ev.ID] = as
			for _, a := range as {
				st[a.GPU].Used = st[a.GPU].Used.Take(a.Placement)
				taken += int(a.Placement.Size)
			}
		case Depart:
			for _, a := range held[ev.ID] {
				st[a.GPU].Used = st[a.GPU].Used.Release(a.Placement)
				taken -= int(a.Placement.Size)
			}
			delete(held, ev.ID)
		}
		sum += float64(taken)
	}
	switch {
	case total == 0 || len(evs) == 0:
	case evs[len(evs)-1].T > evs[0].T:
		res.Utilisation = area / (evs[len(evs)-1].T - evs[0].T) / float64(total)
	default:
		res.Utilisation = sum / float64(len(evs)) / float64(total)
	}
	if got := countTaken(st); got != taken {
		return res, fmt.Errorf("sim: internal accounting mismatch: %d slots taken, %d counted", got, taken)
	}
	return res, nil
}

func countTaken(st []placement.GPUState) int {
	n := 0
	for _, s := range st {
		n += bits.OnesCount64(uint64(s.Used))
	}
	return n
}

func containerOf(ev *Event) placement.ContainerRequest {
	c := placement.ContainerRequest{Devices: max(ev.Devices, 1), Profile: ev.Profile}
	switch {
	case ev.MemoryMB > 0:
		c.Memory = placement.MiB(ev.MemoryMB)
	case ev.Percent > 0:
		c.Memory = placement.Percent(ev.Percent)
	}
	return c
}

func (r *Result) count(err error) {
	switch {
	case errors.Is(err, placement.ErrCapacity):
		r.Capacity++
	case errors.Is(err, placement.ErrFragmented):
		r.Fragmented++
	case errors.Is(err, placement.ErrNoProfile):
		r.NoProfile++
	default:
		r.Other++
	}
}

// Compare runs every policy on the same trace and GPUs, in order.
func Compare(gpus []capability.GPU, evs []Event, pols []placement.Policy) ([]Result, error) {
	out := make([]Result, 0, len(pols))
	for _, p := range pols {
		r, err := Run(gpus, evs, p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Policies returns the policies the simulator compares by default: FirstFit,
// the deployed v2.10 order, and the default fragmentation-aware policy.
func Policies() []placement.Policy {
	return []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.DefaultPolicy}
}

// WriteTable prints results side by side, one row per policy.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tarrivals\taccepted\trej capacity\trej fragmentation\trej no-profile\trej other\tmean slot util\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t\n", r.Policy, r.Arrivals, r.Accepted, r.Capacity, r.Fragmented, r.NoProfile, r.Other, 100*r.Utilisation)
	}
	return tw.Flush()
}

// FormatTable is [WriteTable] into a string.
func FormatTable(rs []Result) string {
	var b strings.Builder
	_ = WriteTable(&b, rs)
	return b.String()
}
