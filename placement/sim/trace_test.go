package sim_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/placement/sim"
)

func TestTraceRoundTrip(t *testing.T) {
	gpus := plainGPUs(t, "A100-SXM4-40GB", 2)
	for _, mem := range []bool{false, true} {
		evs, err := sim.Generate(gpus, sim.SkewedMix(&gpus[0]), sim.GenOptions{Seed: 3, Arrivals: 200, Memory: mem})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := sim.WriteTrace(&buf, evs); err != nil {
			t.Fatal(err)
		}
		got, err := sim.ReadTrace(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, evs) {
			t.Fatalf("round trip changed the trace (memory=%v)", mem)
		}
	}
}

func TestReadTraceErrors(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantLine int
	}{
		{name: "bad json", in: `{"t":1,`, wantLine: 1},
		{name: "unknown field", in: `{"t":1,"op":"arrive","id":"a","gpus":2}`, wantLine: 1},
		{name: "unknown op", in: `{"t":1,"op":"leave","id":"a"}`, wantLine: 1},
		{name: "empty id", in: `{"t":1,"op":"arrive"}`, wantLine: 1},
		{name: "time goes back", in: "{\"t\":2,\"op\":\"arrive\",\"id\":\"a\"}\n{\"t\":1,\"op\":\"arrive\",\"id\":\"b\"}", wantLine: 2},
		{name: "negative time", in: `{"t":-1,"op":"arrive","id":"a"}`, wantLine: 1},
		{name: "two demands", in: `{"t":1,"op":"arrive","id":"a","profile":"1g.5gb","memoryMB":10}`, wantLine: 1},
		{name: "percent above 100", in: `{"t":1,"op":"arrive","id":"a","percent":101}`, wantLine: 1},
		{name: "negative devices", in: `{"t":1,"op":"arrive","id":"a","devices":-1}`, wantLine: 1},
		{name: "depart unknown", in: "# comment\n\n{\"t\":1,\"op\":\"depart\",\"id\":\"a\"}", wantLine: 3},
		{name: "depart with demand", in: "{\"t\":1,\"op\":\"arrive\",\"id\":\"a\"}\n{\"t\":1,\"op\":\"depart\",\"id\":\"a\",\"memoryMB\":5}", wantLine: 2},
		{name: "arrive twice", in: "{\"t\":1,\"op\":\"arrive\",\"id\":\"a\"}\n{\"t\":1,\"op\":\"arrive\",\"id\":\"a\"}", wantLine: 2},
		{name: "two values on a line", in: `{"t":1,"op":"arrive","id":"a"} {}`, wantLine: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.ReadTrace(strings.NewReader(tc.in))
			var te *sim.TraceError
			if !errors.As(err, &te) || !errors.Is(err, sim.ErrTrace) {
				t.Fatalf("err = %v, want a TraceError", err)
			}
			if te.Line != tc.wantLine {
				t.Fatalf("line = %d, want %d", te.Line, tc.wantLine)
			}
		})
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add("{\"t\":0.5,\"op\":\"arrive\",\"id\":\"r1\",\"profile\":\"3g.20gb\"}\n{\"t\":2,\"op\":\"depart\",\"id\":\"r1\"}\n")
	f.Add("{\"t\":1,\"op\":\"arrive\",\"id\":\"a\",\"memoryMB\":9000,\"devices\":2}\n# c\n")
	f.Add(`{"t":1e308,"op":"arrive","id":"x","percent":50}`)
	gpus := plainGPUs(f, "A30", 2)
	f.Fuzz(func(t *testing.T, in string) {
		evs, err := sim.ReadTrace(strings.NewReader(in))
		if err != nil {
			if !errors.Is(err, sim.ErrTrace) {
				t.Fatalf("error %v is not ErrTrace", err)
			}
			return
		}
		// A trace that reads must replay, and survive a round trip.
		r, err := sim.Run(gpus, evs, nil)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if r.Accepted+r.Capacity+r.Fragmented+r.NoProfile+r.Other != r.Arrivals {
			t.Fatalf("outcomes do not add up: %+v", r)
		}
		var buf bytes.Buffer
		if err := sim.WriteTrace(&buf, evs); err != nil {
			t.Fatal(err)
		}
		again, err := sim.ReadTrace(&buf)
		if err != nil || !slices.Equal(again, evs) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func TestGenerateDeterministic(t *testing.T) {
	gpus := plainGPUs(t, "RTX PRO 6000", 4)
	a, err := sim.Generate(gpus, sim.UniformMix(&gpus[0]), sim.HeavyChurn(9))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sim.Generate(gpus, sim.UniformMix(&gpus[0]), sim.HeavyChurn(9))
	c, _ := sim.Generate(gpus, sim.UniformMix(&gpus[0]), sim.HeavyChurn(10))
	if !slices.Equal(a, b) {
		t.Fatal("equal seeds gave different traces")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds gave equal traces")
	}
	if err := sim.Validate(a); err != nil {
		t.Fatal(err)
	}
	if len(a) != 2*4000 {
		t.Fatalf("%d events, want 8000", len(a))
	}
	if _, err := sim.Generate(gpus, sim.Mix{Profiles: []string{"9g.1gb"}, Weights: []float64{1}}, sim.GenOptions{}); !errors.Is(err, sim.ErrMix) {
		t.Fatalf("unknown profile: err = %v", err)
	}
}

func TestRunCounts(t *testing.T) {
	gpus := plainGPUs(t, "A30", 1)
	in := `{"t":0,"op":"arrive","id":"a","profile":"2g.12gb"}
{"t":0,"op":"arrive","id":"b","profile":"1g.6gb"}
{"t":1,"op":"arrive","id":"c","profile":"2g.12gb"}
{"t":1,"op":"arrive","id":"d","memoryMB":30000}
{"t":2,"op":"depart","id":"a"}
{"t":2,"op":"arrive","id":"e","percent":100}
{"t":3,"op":"arrive","id":"f","devices":2,"memoryMB":5000}
{"t":4,"op":"depart","id":"b"}
`
	evs, err := sim.ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(gpus, evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	// a takes [0,2) and b slot 2, so c finds one free slot (capacity); d
	// exceeds every profile; after a leaves, e needs the whole GPU
	// (capacity) and f's two 1g devices take slots 0 and 1.
	want := sim.Result{Policy: "frag-aware", Arrivals: 6, Accepted: 3, Capacity: 2, NoProfile: 1}
	got := r
	got.Utilisation = 0
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Slots taken over time: [0,1) 3, [1,2) 3, [2,3) 1, [3,4) 3 of 4.
	if want := (3.0 + 3 + 1 + 3) / 4 / 4; r.Utilisation != want {
		t.Fatalf("utilisation %v, want %v", r.Utilisation, want)
	}
}

// scriptedPlacer answers arrivals from a table by ID and records
// arrivals and departures. onArrive, if set, runs first on every arrival.
type scriptedPlacer struct {
	answers  map[string]error
	slots    int
	onArrive func(ctx context.Context, ev *sim.Event)
	arrived  []string
	departed []string
}

func (p *scriptedPlacer) Arrive(ctx context.Context, ev *sim.Event) (int, error) {
	if p.onArrive != nil {
		p.onArrive(ctx, ev)
	}
	p.arrived = append(p.arrived, ev.ID)
	if err := p.answers[ev.ID]; err != nil {
		return 0, err
	}
	return p.slots, nil
}

func (p *scriptedPlacer) Depart(ev *sim.Event) { p.departed = append(p.departed, ev.ID) }

func TestReplay(t *testing.T) {
	in := `{"t":0,"op":"arrive","id":"a"}
{"t":0,"op":"arrive","id":"frag"}
{"t":1,"op":"arrive","id":"cap"}
{"t":1,"op":"arrive","id":"bad"}
{"t":2,"op":"depart","id":"frag"}
{"t":2,"op":"depart","id":"a"}
{"t":4,"op":"arrive","id":"b"}
`
	evs, err := sim.ReadTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	p := &scriptedPlacer{slots: 2, answers: map[string]error{
		"frag": &placement.UnschedulableError{Reason: placement.ErrFragmented},
		"cap":  &placement.UnschedulableError{Reason: placement.ErrCapacity},
		"bad":  &placement.RequestError{Container: 0, Field: "Devices"},
	}}
	r, err := sim.Replay(context.Background(), evs, 4, p)
	if err != nil {
		t.Fatal(err)
	}
	want := sim.Result{Arrivals: 5, Accepted: 2, Capacity: 1, Fragmented: 1, Other: 1}
	got := r
	got.Utilisation = 0
	if got != want {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// a holds 2 of 4 slots over [0,2), nothing over [2,4).
	if want := 2.0 * 2 / 4 / 4; r.Utilisation != want {
		t.Errorf("utilisation %v, want %v", r.Utilisation, want)
	}
	if want := []string{"a"}; !slices.Equal(p.departed, want) {
		t.Errorf("departed %v, want %v (only accepted arrivals)", p.departed, want)
	}

	fatal := errors.New("allocator broke")
	p.answers["b"] = fatal
	if _, err := sim.Replay(context.Background(), evs, 4, p); !errors.Is(err, fatal) {
		t.Errorf("Replay with a failing placer = %v, want it wrapped", err)
	}
	var te *sim.TraceError
	if _, err := sim.Replay(context.Background(), evs[1:], 4, p); !errors.As(err, &te) {
		t.Errorf("Replay of an invalid trace = %v, want a *TraceError", err)
	}
}

func TestReplayStopsWhenCtxIsDone(t *testing.T) {
	evs := []sim.Event{
		{T: 0, Op: sim.Arrive, ID: "a"},
		{T: 1, Op: sim.Arrive, ID: "b"},
		{T: 2, Op: sim.Depart, ID: "a"},
		{T: 3, Op: sim.Arrive, ID: "c"},
	}
	type ctxKey struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "replay's"))
	defer cancel()
	p := &scriptedPlacer{slots: 1, onArrive: func(got context.Context, ev *sim.Event) {
		if got.Value(ctxKey{}) != "replay's" {
			t.Errorf("Arrive(%s) got a context other than Replay's", ev.ID)
		}
		if ev.ID == "b" {
			cancel() // as if the caller gave up while b was being placed
		}
	}}
	r, err := sim.Replay(ctx, evs, 2, p)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Replay after cancel: got %v, want %v", err, context.Canceled)
	}
	if want := []string{"a", "b"}; !slices.Equal(p.arrived, want) {
		t.Errorf("arrivals placed: got %v, want %v (none after the cancel)", p.arrived, want)
	}
	if got, want := r.Accepted, 2; got != want {
		t.Errorf("accepted before the cancel: got %d, want %d", got, want)
	}
}

func TestGenerateRefuses(t *testing.T) {
	gpus := plainGPUs(t, "A30", 1)
	mix := sim.UniformMix(&gpus[0])
	tests := []struct {
		name string
		mix  sim.Mix
		opts sim.GenOptions
		want error
	}{
		{name: "negative arrivals", mix: mix, opts: sim.GenOptions{Arrivals: -1}, want: sim.ErrGenOptions},
		{name: "negative load", mix: mix, opts: sim.GenOptions{Load: -1}, want: sim.ErrGenOptions},
		{name: "NaN load", mix: mix, opts: sim.GenOptions{Load: math.NaN()}, want: sim.ErrGenOptions},
		{name: "infinite life", mix: mix, opts: sim.GenOptions{MeanLife: math.Inf(1)}, want: sim.ErrGenOptions},
		{name: "infinite weight", mix: sim.Mix{Profiles: []string{"1g.6gb"}, Weights: []float64{math.Inf(1)}}, want: sim.ErrMix},
		{name: "NaN weight", mix: sim.Mix{Profiles: []string{"1g.6gb"}, Weights: []float64{math.NaN()}}, want: sim.ErrMix},
		{name: "weights missing", mix: sim.Mix{Profiles: []string{"1g.6gb"}}, want: sim.ErrMix},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := sim.Generate(gpus, tc.mix, tc.opts)
			if !errors.Is(err, tc.want) || evs != nil {
				t.Fatalf("Generate = %d events, %v; want %v", len(evs), err, tc.want)
			}
		})
	}
}

func TestMixByName(t *testing.T) {
	gpus := plainGPUs(t, "A100-SXM4-40GB", 1)
	for _, tc := range []struct {
		name string
		want sim.Mix
	}{
		{name: "uniform", want: sim.UniformMix(&gpus[0])},
		{name: "skewed", want: sim.SkewedMix(&gpus[0])},
	} {
		got, err := sim.MixByName(tc.name, &gpus[0])
		if err != nil || got.Name != tc.want.Name || !slices.Equal(got.Profiles, tc.want.Profiles) || !slices.Equal(got.Weights, tc.want.Weights) {
			t.Errorf("MixByName(%q) = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := sim.MixByName("zipf", &gpus[0]); !errors.Is(err, sim.ErrMix) {
		t.Errorf("MixByName(zipf) err = %v, want ErrMix", err)
	}
}
