package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/dynmig/dynmig/capability"
)

// Mix is a weighted choice of profiles for synthetic arrivals.
type Mix struct {
	Name     string
	Profiles []string
	Weights  []float64 // same length as Profiles, each > 0
}

// UniformMix draws every profile of gpu with equal weight.
func UniformMix(gpu *capability.GPU) Mix {
	m := Mix{Name: "uniform"}
	for i := range gpu.Profiles {
		m.Profiles = append(m.Profiles, gpu.Profiles[i].Name)
		m.Weights = append(m.Weights, 1)
	}
	return m
}

// SkewedMix favours small profiles: weight 1/size² for a profile whose
// smallest placement is size slots, so on an 8-slot GPU a 1-slot profile
// is 64 times as likely as the full GPU. Most clusters see this shape.
func SkewedMix(gpu *capability.GPU) Mix {
	m := Mix{Name: "skewed"}
	for i := range gpu.Profiles {
		p := &gpu.Profiles[i]
		s := float64(minSize(p))
		if s == 0 {
			continue
		}
		m.Profiles = append(m.Profiles, p.Name)
		m.Weights = append(m.Weights, 1/(s*s))
	}
	return m
}

// MixByName returns the generator mix called name for gpu: "uniform"
// ([UniformMix]) or "skewed" ([SkewedMix]). Any other name is [ErrMix].
func MixByName(name string, gpu *capability.GPU) (Mix, error) {
	switch name {
	case "uniform":
		return UniformMix(gpu), nil
	case "skewed":
		return SkewedMix(gpu), nil
	}
	return Mix{}, fmt.Errorf("%w: unknown mix %q (want uniform or skewed)", ErrMix, name)
}

// GenOptions shapes a synthetic trace. The zero value works.
type GenOptions struct {
	// Seed makes the trace reproducible: equal options give equal traces.
	Seed uint64
	// Arrivals is the number of arrivals; 0 means 2000.
	Arrivals int
	// Load is the offered load: the mean number of slots requested by live
	// arrivals divided by the slots of all GPUs, were nothing rejected;
	// 0 means 1.0.
	Load float64
	// MeanLife is the mean (exponential) lifetime; 0 means 100. Arrivals
	// are a Poisson process whose rate follows from Load.
	MeanLife float64
	// Memory emits memoryMB demands (the drawn profile's memory) instead of
	// profile names, exercising the smallest-fitting-profile rule.
	Memory bool
}

// HeavyChurn returns the options of the heavy-churn traces: 4000 arrivals
// at an offered load of 1.3 with short lives, so the GPUs stay full and
// turn over constantly.
func HeavyChurn(seed uint64) GenOptions {
	return GenOptions{Seed: seed, Arrivals: 4000, Load: 1.3, MeanLife: 20}
}

// Generator sentinels.
var (
	// ErrMix is returned for a mix that cannot be drawn from.
	ErrMix = errors.New("sim: unusable profile mix")
	// ErrGenOptions is returned for negative or non-finite options.
	ErrGenOptions = errors.New("sim: invalid generator options")
)

// Generate draws a trace of single-device arrivals and their departures for
// gpus (which must be non-empty; the first GPU's profile table defines slot
// sizes and memory) from mix. Negative or non-finite options are
// [ErrGenOptions].
func Generate(gpus []capability.GPU, mix Mix, opts GenOptions) ([]Event, error) {
	if opts.Arrivals < 0 || !nonNegative(opts.Load) || !nonNegative(opts.MeanLife) {
		return nil, fmt.Errorf("%w: arrivals %d, load %v, mean life %v", ErrGenOptions, opts.Arrivals, opts.Load, opts.MeanLife)
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("%w: no GPUs", ErrMix)
	}
	if len(mix.Profiles) == 0 || len(mix.Profiles) != len(mix.Weights) {
		return nil, fmt.Errorf("%w: %d profiles, %d weights", ErrMix, len(mix.Profiles), len(mix.Weights))
	}
	ref := &gpus[0]
	sizes := make([]float64, len(mix.Profiles))
	mem := make([]uint64, len(mix.Profiles))
	var wsum, slotsMean float64
	for i, name := range mix.Profiles {
		p := ref.Profile(name)
		if p == nil || minSize(p) == 0 || !(mix.Weights[i] > 0) || math.IsInf(mix.Weights[i], 1) {
			return nil, fmt.Errorf("%w: profile %q (weight %v) not usable on %s", ErrMix, name, mix.Weights[i], ref.Name)
		}
		sizes[i], mem[i] = float64(minSize(p)), p.MemoryMB
		wsum += mix.Weights[i]
		slotsMean += mix.Weights[i] * sizes[i]
	}
	slotsMean /= wsum
	var total float64
	for i := range gpus {
		total += float64(gpus[i].Width())
	}
	arrivals := cmp.Or(opts.Arrivals, 2000)
	load := cmp.Or(opts.Load, 1.0)
	life := cmp.Or(opts.MeanLife, 100.0)
	rate := load * total / (life * slotsMean)

	rng := rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15))
	evs := make([]Event, 0, 2*arrivals)
	t := 0.0
	for n := range arrivals {
		t += rng.ExpFloat64() / rate
		k := draw(rng, mix.Weights, wsum)
		id := "r" + strconv.Itoa(n)
		a := Event{T: t, Op: Arrive, ID: id}
		if opts.Memory {
			a.MemoryMB = mem[k]
		} else {
			a.Profile = mix.Profiles[k]
		}
		evs = append(evs, a, Event{T: t + max(rng.ExpFloat64()*life, 1e-9), Op: Depart, ID: id})
	}
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	return evs, nil
}

// nonNegative reports whether v is finite and not negative.
func nonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

func draw(rng *rand.Rand, w []float64, sum float64) int {
	x := rng.Float64() * sum
	for i, wi := range w {
		if x < wi {
			return i
		}
		x -= wi
	}
	return len(w) - 1
}

func minSize(p *capability.Profile) uint32 {
	var m uint32
	for _, pl := range p.Placements {
		if m == 0 || pl.Size < m {
			m = pl.Size
		}
	}
	return m
}
