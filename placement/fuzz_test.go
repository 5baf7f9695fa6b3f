package placement_test

import (
	"errors"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// byteSource hands out fuzz bytes as small numbers; past the end it
// returns zeros, so every input decodes to some grid and request.
type byteSource struct{ b []byte }

func (s *byteSource) next() byte {
	if len(s.b) == 0 {
		return 0
	}
	v := s.b[0]
	s.b = s.b[1:]
	return v
}

var fuzzNames = [...]string{"1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb", "1g.10gb", ""}

// fuzzGPU decodes a GPU whose profile table may be anything NewGrid is
// given: empty or repeated names, placements off the grid, empty or
// wrapping ones.
func fuzzGPU(s *byteSource, i int) capability.GPU {
	gpu := capability.GPU{UUID: "GPU-" + string(rune('a'+i)), Name: "NVIDIA A100-SXM4-40GB", MemoryMB: uint64(s.next()) << 8}
	for range s.next() % 5 {
		p := capability.Profile{
			Name:       fuzzNames[int(s.next())%len(fuzzNames)],
			MemoryMB:   uint64(s.next()) << 8,
			SliceCount: uint32(s.next() % 9),
		}
		for range s.next() % 8 {
			start, size := uint32(s.next()), uint32(s.next()%16)
			if start > 0xF0 {
				start = ^uint32(0) - uint32(s.next()) // wraps
			}
			p.Placements = append(p.Placements, capability.Placement{Start: start % 80, Size: size})
		}
		gpu.Profiles = append(gpu.Profiles, p)
	}
	return gpu
}

// fuzzRequest decodes a request with out-of-range counts, demands, kinds
// and names.
func fuzzRequest(s *byteSource) placement.Request {
	var req placement.Request
	for range s.next() % 4 {
		c := placement.ContainerRequest{Devices: int(int8(s.next())) % 6}
		switch s.next() % 5 {
		case 0:
		case 1:
			c.Memory = placement.MiB(uint64(s.next()) << 8)
		case 2:
			c.Memory = placement.Percent(uint32(s.next()))
		case 3:
			c.Profile = fuzzNames[int(s.next())%len(fuzzNames)]
		default:
			c.Memory = placement.Memory{Kind: placement.MemoryKind(s.next())}
		}
		req.Containers = append(req.Containers, c)
	}
	if s.next()%2 == 1 {
		req.Preference = []string{[]string{"1g", "2g", "3g", "7g", "1g.10gb", "x"}[int(s.next())%6]}
	}
	if s.next()%4 == 1 {
		req.NoUseUUIDs = []string{"GPU-a"}
	}
	return req
}

// FuzzSelect feeds Select arbitrary grids, occupancies and requests: it
// never panics, and what it returns is a legal, non-overlapping, complete
// placement of the request.
func FuzzSelect(f *testing.F) {
	f.Add([]byte{}, uint64(0))
	f.Add([]byte{160, 2, 0, 19, 1, 3, 0, 1, 2, 1, 4, 1, 1, 160, 2, 2, 0, 2, 2, 2, 1, 2, 0, 0}, uint64(0b1010))
	f.Add([]byte{1, 4, 3, 200, 7, 2, 0, 8, 0, 0, 255, 9, 250, 3}, ^uint64(0)>>1)
	pols := []placement.Policy{placement.FirstFit{}, placement.V210{}, placement.DefaultPolicy}
	f.Fuzz(func(t *testing.T, data []byte, used uint64) {
		s := &byteSource{b: data}
		var gpus []placement.GPUState
		for i := range int(s.next() % 4) {
			gpu := fuzzGPU(s, i)
			g, err := placement.NewGrid(&gpu)
			if err != nil {
				if !errors.Is(err, placement.ErrInvalidGrid) {
					t.Fatalf("NewGrid err = %v, want ErrInvalidGrid", err)
				}
				continue
			}
			gpus = append(gpus, placement.GPUState{Grid: g, Used: placement.Occupancy(used >> (i * 7))})
		}
		gpus = append(gpus, placement.GPUState{}) // a GPU without a grid is never chosen
		req := fuzzRequest(s)
		pol := pols[int(s.next())%len(pols)]
		as, err := placement.Select(gpus, &req, pol)
		if err != nil {
			if req.Validate() == nil && !errors.Is(err, placement.ErrUnschedulable) {
				t.Fatalf("Select err = %v, want ErrUnschedulable for a valid request", err)
			}
			return
		}
		if got, want := len(as), req.DeviceCount(); got != want {
			t.Fatalf("got %d assignments, want %d", got, want)
		}
		taken := make([]placement.Occupancy, len(gpus))
		for i := range gpus {
			taken[i] = gpus[i].Used
		}
		for _, a := range as {
			g := gpus[a.GPU].Grid
			if g == nil || !g.Legal(a.Profile, a.Placement) {
				t.Fatalf("%v: not a published placement of that GPU", a)
			}
			if !taken[a.GPU].Fits(a.Placement) {
				t.Fatalf("%v overlaps %v", a, taken[a.GPU])
			}
			taken[a.GPU] = taken[a.GPU].Take(a.Placement)
		}
		_ = placement.NodeScore(gpus, as, placement.ScoreMode(s.next()%3))
	})
}
