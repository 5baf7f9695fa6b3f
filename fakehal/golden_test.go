package fakehal_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/fakehal"
)

// lgipRow is one GPU instance profile as `nvidia-smi mig -lgip` printed it.
type lgipRow struct {
	line                    int
	source, model           string
	driver                  fakehal.Driver
	name                    string
	id, instances, sms      uint32
	gib                     float64
	dec, enc, ce, jpeg, ofa uint32
}

// readLGIP parses testdata/nvidia-smi-lgip.txt (its format is described in
// the file's header).
func readLGIP(t *testing.T) []lgipRow {
	t.Helper()
	f, err := os.Open("testdata/nvidia-smi-lgip.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []lgipRow
	var cur lgipRow
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "source "):
			cur = lgipRow{source: strings.TrimPrefix(line, "source ")}
		case strings.HasPrefix(line, "model "):
			rest := strings.TrimPrefix(line, "model ")
			i := strings.LastIndexByte(rest, ' ')
			name, err := strconv.Unquote(rest[:max(i, 0)])
			if err != nil || i < 0 {
				t.Fatalf("line %d: bad model line %q", n, line)
			}
			cur.model = name
			switch rest[i+1:] {
			case "current":
				cur.driver = fakehal.DriverCurrent
			case "early":
				cur.driver = fakehal.DriverEarly
			default:
				t.Fatalf("line %d: bad driver generation %q", n, rest[i+1:])
			}
		default:
			fs := strings.Fields(line)
			if len(fs) != 10 || cur.model == "" {
				t.Fatalf("line %d: want 10 fields after a model line: %q", n, line)
			}
			r := cur
			r.line, r.name = n, fs[0]
			gib, err := strconv.ParseFloat(fs[3], 64)
			if err != nil {
				t.Fatalf("line %d: memory %q: %v", n, fs[3], err)
			}
			r.gib = gib
			for j, dst := range []*uint32{&r.id, &r.instances, nil, &r.sms, &r.dec, &r.enc, &r.ce, &r.jpeg, &r.ofa} {
				if dst == nil {
					continue
				}
				v, err := strconv.ParseUint(fs[j+1], 10, 32)
				if err != nil {
					t.Fatalf("line %d: field %d %q: %v", n, j+2, fs[j+1], err)
				}
				*dst = uint32(v)
			}
			rows = append(rows, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestGoldenLGIP: every profile real GPUs printed in public posts
// (testdata/nvidia-smi-lgip.txt, each with its source) is reproduced by the
// preset at the driver generation the post showed: name, profile ID,
// instance count, memory (nvidia-smi prints GiB to two decimals), SMs and
// media engines. Copy engines are not modelled by fakehal.
func TestGoldenLGIP(t *testing.T) {
	rows := readLGIP(t)
	if len(rows) < 20 {
		t.Fatalf("%d golden rows, want the file's", len(rows))
	}
	for _, r := range rows {
		t.Run(fmt.Sprintf("%s/%v/%s", r.model, r.driver, r.name), func(t *testing.T) {
			m, ok := fakehal.LookupModel(r.model)
			if !ok {
				t.Fatalf("line %d: no preset %q", r.line, r.model)
			}
			m = m.ForDriver(r.driver)
			p, ok := profileNamed(m, r.name)
			if !ok {
				t.Fatalf("line %d (%s): %s %v has no profile %s", r.line, r.source, r.model, r.driver, r.name)
			}
			if p.ID != r.id || p.InstanceCount != r.instances || p.MultiprocessorCount != r.sms {
				t.Errorf("line %d (%s): ID %d, %d instances, %d SMs; want %d, %d, %d",
					r.line, r.source, p.ID, p.InstanceCount, p.MultiprocessorCount, r.id, r.instances, r.sms)
			}
			if gib := float64(p.MemoryMB) / 1024; math.Abs(gib-r.gib) >= 0.01 {
				t.Errorf("line %d (%s): %d MiB is %.3f GiB, nvidia-smi printed %.2f", r.line, r.source, p.MemoryMB, gib, r.gib)
			}
			want := fakehal.Engines{Decoders: r.dec, Encoders: r.enc, JPEG: r.jpeg, OFA: r.ofa}
			if got := m.EnginesOf(p.Index); got != want {
				t.Errorf("line %d (%s): engines %v, want %v", r.line, r.source, got, want)
			}
		})
	}
}
