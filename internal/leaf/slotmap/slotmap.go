package slotmap

import (
	"fmt"
	"io"
	"strings"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement"
)

// Marks drawn for slots that carry no owner mark.
const (
	Free     = '.'
	Unowned  = '?'
	Conflict = '!'
	// Overflow marks owners beyond the len(Alphabet) first ones.
	Overflow = '+'
)

// Alphabet is the order in which a Legend hands out marks.
const Alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// Span is one placement held on a GPU. Owner is the legend key (for example
// a pod name); "" draws [Unowned].
type Span struct {
	Placement capability.Placement
	Owner     string
}

// Row is one GPU to draw: a label such as "GPU0", the width of its slot grid
// and the spans held on it, in any order.
type Row struct {
	Label string
	Width uint32
	Spans []Span
}

// Legend assigns marks to owners in order of first use. The zero value is
// not usable; call [NewLegend].
type Legend struct {
	marks map[string]rune
	order []string
}

// NewLegend returns an empty legend.
func NewLegend() *Legend { return &Legend{marks: map[string]rune{}} }

// Mark returns owner's mark, assigning the next free one on first use.
// The empty owner is [Unowned].
func (l *Legend) Mark(owner string) rune {
	if owner == "" {
		return Unowned
	}
	if m, ok := l.marks[owner]; ok {
		return m
	}
	m := rune(Overflow)
	if n := len(l.order); n < len(Alphabet) {
		m = rune(Alphabet[n])
	}
	l.marks[owner] = m
	l.order = append(l.order, owner)
	return m
}

// Owners returns every owner that has a mark, in the order marks were given.
func (l *Legend) Owners() []string { return append([]string(nil), l.order...) }

// Draw returns the row as "LABEL [..|..]" without a newline.
func (l *Legend) Draw(r Row) string {
	return r.Label + " " + l.Slots(r)
}

// Slots returns the row's map alone, "[..|..]", ignoring the label.
func (l *Legend) Slots(r Row) string {
	var b strings.Builder
	b.WriteByte('[')
	l.drawSlots(&b, r)
	b.WriteByte(']')
	return b.String()
}

// cell values other than a span index.
const (
	cellFree     = -1
	cellConflict = -2
)

func (l *Legend) drawSlots(b *strings.Builder, r Row) {
	width := r.Width
	for _, s := range r.Spans {
		// A span beyond the grid is drawn, not hidden: it is what the
		// record claims, and a person should see it.
		if s.Placement.Valid() && s.Placement.End() > width && s.Placement.End() <= capability.MaxSlots {
			width = s.Placement.End()
		}
	}
	cells := make([]int, width)
	for i := range cells {
		cells[i] = cellFree
	}
	for si, s := range r.Spans {
		if !s.Placement.Valid() {
			continue
		}
		for slot := s.Placement.Start; slot < s.Placement.End() && slot < width; slot++ {
			if cells[slot] == cellFree {
				cells[slot] = si
			} else {
				cells[slot] = cellConflict
			}
		}
	}
	for i, c := range cells {
		if i > 0 && c != cells[i-1] {
			b.WriteByte('|')
		}
		switch c {
		case cellFree:
			b.WriteRune(Free)
		case cellConflict:
			b.WriteRune(Conflict)
		default:
			b.WriteRune(l.Mark(r.Spans[c].Owner))
		}
	}
}

// Write draws rows one per line, labels padded to the same width.
func (l *Legend) Write(w io.Writer, indent string, rows []Row) error {
	pad := 0
	for _, r := range rows {
		pad = max(pad, len(r.Label))
	}
	for _, r := range rows {
		r.Label = fmt.Sprintf("%-*s", pad, r.Label)
		if _, err := fmt.Fprintf(w, "%s%s\n", indent, l.Draw(r)); err != nil {
			return err
		}
	}
	return nil
}

// Figures are the occupancy figures of one GPU.
type Figures struct {
	// Slots is the grid width, FreeSlots the slots not taken.
	Slots, FreeSlots int
	// Capacity is how many more instances could still be created, summed
	// over the GPU's profiles: what the default placement policy loses as
	// little of as possible ([placement.Grid.Capacity]).
	Capacity int
	// LargestFit is the largest profile with a free published placement,
	// "" when none fits.
	LargestFit string
	// Unusable is the free slots that no free published placement covers:
	// capacity no request can use until a neighbour is released (slot 7 of
	// an A100 next to a 1g at slot 6). It differs from
	// [placement.Grid.Stranded], which also counts usable slots outside the
	// largest free placement.
	Unusable int
}

// Measure computes the figures of a GPU from its compiled grid and
// occupancy. A GPUState without a grid measures as zero.
func Measure(gs placement.GPUState) Figures {
	if gs.Grid == nil {
		return Figures{}
	}
	g := gs.Grid
	f := Figures{
		Slots:     int(g.Width()),
		FreeSlots: int(g.Width()) - (gs.Used & g.Full()).Count(),
		Capacity:  g.Capacity(gs.Used),
	}
	var coverable uint64
	profiles := g.Profiles() // ordered by memory, then slice count
	for i := len(profiles) - 1; i >= 0; i-- {
		for _, p := range profiles[i].Placements {
			if gs.Used.Fits(p) {
				coverable |= p.Mask()
				if f.LargestFit == "" {
					f.LargestFit = profiles[i].Name
				}
			}
		}
	}
	free := uint64(g.Full()) &^ uint64(gs.Used)
	f.Unusable = placement.Occupancy(free &^ coverable).Count()
	return f
}

// String formats the figures as
// "free 3/8 slots, capacity 4, largest fit 2g.10gb, 1 unusable".
func (f Figures) String() string {
	largest := f.LargestFit
	if largest == "" {
		largest = "none"
	}
	s := fmt.Sprintf("free %d/%d slots, capacity %d, largest fit %s", f.FreeSlots, f.Slots, f.Capacity, largest)
	if f.Unusable > 0 {
		s += fmt.Sprintf(", %d unusable", f.Unusable)
	}
	return s
}
