package slotmap_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
	"github.com/dynmig/dynmig/internal/leaf/slotmap"
	"github.com/dynmig/dynmig/placement"
)

func pl(start, size uint32) capability.Placement {
	return capability.Placement{Start: start, Size: size}
}

func TestDraw(t *testing.T) {
	tests := []struct {
		name string
		row  slotmap.Row
		want string
	}{
		{name: "empty", row: slotmap.Row{Label: "GPU0", Width: 8}, want: "GPU0 [........]"},
		{name: "mixed", row: slotmap.Row{Label: "GPU1", Width: 8, Spans: []slotmap.Span{
			{Placement: pl(4, 4), Owner: "c"}, {Placement: pl(0, 2), Owner: "a"}, {Placement: pl(2, 1), Owner: "b"},
		}}, want: "GPU1 [aa|b|.|cccc]"},
		{name: "same owner twice stays two intervals", row: slotmap.Row{Label: "GPU2", Width: 4, Spans: []slotmap.Span{
			{Placement: pl(0, 1), Owner: "a"}, {Placement: pl(1, 1), Owner: "a"},
		}}, want: "GPU2 [a|a|..]"},
		{name: "unowned and conflict", row: slotmap.Row{Label: "GPU3", Width: 8, Spans: []slotmap.Span{
			{Placement: pl(0, 2)}, {Placement: pl(4, 4), Owner: "a"}, {Placement: pl(6, 2), Owner: "b"},
		}}, want: "GPU3 [??|..|aa|!!]"},
		{name: "span beyond the grid is drawn", row: slotmap.Row{Label: "GPU4", Width: 4, Spans: []slotmap.Span{
			{Placement: pl(2, 4), Owner: "a"},
		}}, want: "GPU4 [..|aaaa]"},
		{name: "invalid span ignored", row: slotmap.Row{Label: "GPU5", Width: 2, Spans: []slotmap.Span{
			{Placement: pl(0, 0), Owner: "a"},
		}}, want: "GPU5 [..]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := slotmap.NewLegend()
			for _, o := range []string{"a", "b", "c"} {
				l.Mark(o)
			}
			if got := l.Draw(tt.row); got != tt.want {
				t.Errorf("Draw() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLegendMarksAreStable(t *testing.T) {
	l := slotmap.NewLegend()
	for i := range len(slotmap.Alphabet) + 2 {
		l.Mark(fmt.Sprint("pod-", i))
	}
	if got, want := l.Mark("pod-0"), 'a'; got != want {
		t.Errorf("Mark(pod-0) = %q, want %q", got, want)
	}
	if got, want := l.Mark("pod-61"), '9'; got != want {
		t.Errorf("Mark(pod-61) = %q, want %q", got, want)
	}
	if got, want := l.Mark("pod-62"), slotmap.Overflow; got != want {
		t.Errorf("Mark(pod-62) = %q, want %q", got, want)
	}
	if got, want := l.Mark(""), slotmap.Unowned; got != want {
		t.Errorf("Mark(\"\") = %q, want %q", got, want)
	}
	if got, want := len(l.Owners()), len(slotmap.Alphabet)+2; got != want {
		t.Errorf("len(Owners()) = %d, want %d", got, want)
	}
}

func a100Grid(t *testing.T) *placement.Grid {
	t.Helper()
	node := fakehal.MustNew(fakehal.Options{})
	gpus, _, err := capability.Discover(t.Context(), node, capability.DefaultAllowlist())
	if err != nil {
		t.Fatal(err)
	}
	g, err := placement.NewGrid(&gpus[0])
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestMeasure(t *testing.T) {
	g := a100Grid(t)
	var none placement.Occupancy
	tests := []struct {
		name string
		used placement.Occupancy
		want slotmap.Figures
	}{
		{name: "empty", used: none, want: slotmap.Figures{Slots: 8, FreeSlots: 8, Capacity: 13, LargestFit: "7g.40gb"}},
		{name: "full", used: g.Full(), want: slotmap.Figures{Slots: 8}},
		{name: "1g at 0..6 leaves slot 7 unusable",
			used: none.Take(pl(0, 7)),
			want: slotmap.Figures{Slots: 8, FreeSlots: 1, Unusable: 1}},
		{name: "odd slots free: 1g fits, nothing larger",
			used: none.Take(pl(0, 1)).Take(pl(2, 1)).Take(pl(4, 1)).Take(pl(6, 1)),
			want: slotmap.Figures{Slots: 8, FreeSlots: 4, Capacity: 3, LargestFit: "1g.5gb", Unusable: 1}},
		{name: "2g fits beside a free 3g: nothing unusable",
			used: none.Take(pl(0, 2)),
			want: slotmap.Figures{Slots: 8, FreeSlots: 6, Capacity: 5 + 2 + 1, LargestFit: "3g.20gb"}},
		{name: "3g taken: the other half is whole",
			used: none.Take(pl(0, 4)),
			want: slotmap.Figures{Slots: 8, FreeSlots: 4, Capacity: 3 + 1 + 1, LargestFit: "3g.20gb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slotmap.Measure(placement.GPUState{Grid: g, Used: tt.used})
			if got != tt.want {
				t.Errorf("Measure() = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := slotmap.Measure(placement.GPUState{}); got != (slotmap.Figures{}) {
		t.Errorf("Measure(zero) = %+v, want zero", got)
	}
}

func TestWritePadsLabels(t *testing.T) {
	var buf bytes.Buffer
	l := slotmap.NewLegend()
	rows := []slotmap.Row{{Label: "GPU9", Width: 2}, {Label: "GPU10", Width: 2}}
	if err := l.Write(&buf, "  ", rows); err != nil {
		t.Fatal(err)
	}
	want := "  GPU9  [..]\n  GPU10 [..]\n"
	if got := buf.String(); got != want {
		t.Errorf("Write() = %q, want %q", got, want)
	}
}

func ExampleLegend_Draw() {
	l := slotmap.NewLegend()
	fmt.Println(l.Draw(slotmap.Row{Label: "GPU0", Width: 8, Spans: []slotmap.Span{
		{Placement: capability.Placement{Start: 0, Size: 2}, Owner: "default/train"},
		{Placement: capability.Placement{Start: 2, Size: 2}, Owner: "default/infer"},
		{Placement: capability.Placement{Start: 4, Size: 4}, Owner: "default/notebook"},
	}}))
	for _, o := range l.Owners() {
		fmt.Printf("%c %s\n", l.Mark(o), o)
	}
	// Output:
	// GPU0 [aa|bb|cccc]
	// a default/train
	// b default/infer
	// c default/notebook
}

func ExampleFigures_String() {
	fmt.Println(slotmap.Figures{Slots: 8, FreeSlots: 3, Capacity: 4, LargestFit: "2g.10gb", Unusable: 1})
	// Output:
	// free 3/8 slots, capacity 4, largest fit 2g.10gb, 1 unusable
}
