package sim

import (
	"context"
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

// Placer is one node's allocator as [Replay] drives it.
type Placer interface {
	// Arrive places the arrival ev and returns the memory slots it took.
	// ctx is Replay's: an allocator that may block (an API call, a lock)
	// waits no longer than it allows. A rejection is an error matching
	// placement.ErrUnschedulable (counted by its reason) or
	// placement.ErrInvalidRequest (counted as other); any other error
	// stops the replay.
	Arrive(ctx context.Context, ev *Event) (slots int, err error)
	// Depart releases what the accepted arrival with ev.ID took. Replay
	// calls it only for arrivals Arrive accepted. It must not block.
	Depart(ev *Event)
}

// Replay validates evs and replays them through p, counting arrivals,
// acceptances and rejections and measuring slot utilisation against the
// node's slots (the sum of its GPUs' grid widths). Result.Policy is left
// empty for the caller to name. It fails with a [*TraceError] for an
// invalid trace and with Arrive's error, naming the event, for anything
// that is not a rejection. Once ctx is done it stops before the next
// arrival with an error wrapping ctx.Err(), returning what it counted so
// far.
func Replay(ctx context.Context, evs []Event, slots int, p Placer) (Result, error) {
	if err := Validate(evs); err != nil {
		return Result{}, err
	}
	var res Result
	held := map[string]int{} // slots taken by each accepted, present arrival
	taken := 0
	var area, sum float64
	for i := range evs {
		ev := &evs[i]
		if i > 0 {
			area += (ev.T - evs[i-1].T) * float64(taken)
		}
		switch ev.Op {
		case Arrive:
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("sim: event %d (%s): %w", i+1, ev.ID, err)
			}
			res.Arrivals++
			n, err := p.Arrive(ctx, ev)
			if err != nil {
				if !res.count(err) {
					return res, fmt.Errorf("sim: event %d (%s): %w", i+1, ev.ID, err)
				}
				break
			}
			res.Accepted++
			held[ev.ID] = n
			taken += n
		case Depart:
			if n, ok := held[ev.ID]; ok {
				p.Depart(ev)
				taken -= n
				delete(held, ev.ID)
			}
		}
		sum += float64(taken)
	}
	switch {
	case slots == 0 || len(evs) == 0:
	case evs[len(evs)-1].T > evs[0].T:
		res.Utilisation = area / (evs[len(evs)-1].T - evs[0].T) / float64(slots)
	default:
		res.Utilisation = sum / float64(len(evs)) / float64(slots)
	}
	return res, nil
}

// Run replays evs on gpus with policy pol (nil: the default) and reports the
// outcome. The GPUs start empty. It fails with a [*TraceError] for an
// invalid trace and a *placement.GridError for unusable GPUs.
func Run(gpus []capability.GPU, evs []Event, pol placement.Policy) (Result, error) {
	if err := Validate(evs); err != nil {
		return Result{}, err
	}
	sp := &selectPlacer{
		st:   make([]placement.GPUState, len(gpus)),
		held: map[string][]placement.Assignment{},
		req:  placement.Request{Containers: make([]placement.ContainerRequest, 1)},
	}
	var slots int
	for i := range gpus {
		g, err := placement.NewGrid(&gpus[i])
		if err != nil {
			return Result{}, err
		}
		sp.st[i].Grid = g
		slots += int(g.Width())
	}
	sp.sel = placement.NewSelector(placement.SelectorOptions{Policy: pol})
	// The selector never blocks, so no caller's ctx is needed.
	res, err := Replay(context.Background(), evs, slots, sp)
	res.Policy = sp.sel.Policy().String()
	if err != nil {
		return res, err
	}
	if got, want := countTaken(sp.st), sp.taken; got != want {
		return res, fmt.Errorf("sim: internal accounting mismatch: %d slots taken, %d counted", got, want)
	}
	return res, nil
}

// selectPlacer is the [Placer] of [Run]: a placement.Selector over the
// node's occupancy.
type selectPlacer struct {
	st    []placement.GPUState
	sel   *placement.Selector
	req   placement.Request
	held  map[string][]placement.Assignment
	taken int // slots held, checked against the occupancy bitmaps
}

func (p *selectPlacer) Arrive(_ context.Context, ev *Event) (int, error) {
	p.req.Containers[0] = ContainerOf(ev)
	as, err := p.sel.Select(p.st, &p.req, nil)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range as {
		p.st[a.GPU].Used = p.st[a.GPU].Used.Take(a.Placement)
		n += int(a.Placement.Size)
	}
	p.held[ev.ID] = as
	p.taken += n
	return n, nil
}

func (p *selectPlacer) Depart(ev *Event) {
	for _, a := range p.held[ev.ID] {
		p.st[a.GPU].Used = p.st[a.GPU].Used.Release(a.Placement)
		p.taken -= int(a.Placement.Size)
	}
	delete(p.held, ev.ID)
}

func countTaken(st []placement.GPUState) int {
	n := 0
	for _, s := range st {
		n += bits.OnesCount64(uint64(s.Used))
	}
	return n
}

// ContainerOf returns the container demand of an arrival: Devices (at
// least 1) of Profile, MemoryMB, Percent or a whole GPU, in that order.
func ContainerOf(ev *Event) placement.ContainerRequest {
	c := placement.ContainerRequest{Devices: max(ev.Devices, 1), Profile: ev.Profile}
	switch {
	case ev.MemoryMB > 0:
		c.Memory = placement.MiB(ev.MemoryMB)
	case ev.Percent > 0:
		c.Memory = placement.Percent(ev.Percent)
	}
	return c
}

// count records a rejection in r and reports whether err is one.
func (r *Result) count(err error) bool {
	switch {
	case errors.Is(err, placement.ErrCapacity):
		r.Capacity++
	case errors.Is(err, placement.ErrFragmented):
		r.Fragmented++
	case errors.Is(err, placement.ErrNoProfile):
		r.NoProfile++
	case errors.Is(err, placement.ErrUnschedulable), errors.Is(err, placement.ErrInvalidRequest):
		r.Other++
	default:
		return false
	}
	return true
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
