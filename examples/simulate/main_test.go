package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dynmig/dynmig/placement/sim"
)

func TestRunTable(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-model", "A30", "-gpus", "4", "-seed", "2", "-arrivals", "300"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 x NVIDIA A30", "first-fit", "v2.10", "frag-aware", "rej fragmentation"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunJSONAndTraceFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "trace.jsonl")
	var first bytes.Buffer
	if err := run([]string{"-model", "RTX PRO 6000", "-gpus", "3", "-arrivals", "200", "-json", "-write", file}, nil, &first); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := run([]string{"-model", "RTX PRO 6000", "-gpus", "3", "-json", "-trace", file}, nil, &again); err != nil {
		t.Fatal(err)
	}
	type out struct {
		Profiles []string
		Results  []struct {
			Policy   string
			Arrivals int
			Accepted int
		}
	}
	var a, b out
	if err := json.Unmarshal(first.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	if len(a.Results) != 3 || a.Results[0].Arrivals != 200 {
		t.Fatalf("results %+v", a.Results)
	}
	for i := range a.Results {
		if a.Results[i] != b.Results[i] {
			t.Fatalf("replaying the written trace: %+v, want %+v", b.Results[i], a.Results[i])
		}
	}
	if got := strings.Join(a.Profiles, " "); got != "1g.24gb 2g.48gb 4g.96gb" {
		t.Fatalf("profiles %q, want the default allowlist's", got)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want error // matched with errors.Is when set
	}{
		{name: "unknown model", args: []string{"-model", "Z9000"}},
		{name: "bad gpus", args: []string{"-gpus", "0"}},
		{name: "bad mix", args: []string{"-mix", "bimodal"}, want: sim.ErrMix},
		{name: "negative arrivals", args: []string{"-arrivals", "-5"}, want: sim.ErrGenOptions},
		{name: "negative load", args: []string{"-load", "-1"}, want: sim.ErrGenOptions},
		{name: "bad profiles", args: []string{"-profiles", "some"}},
		{name: "missing trace", args: []string{"-trace", "/nonexistent/trace.jsonl"}},
		{name: "stray argument", args: []string{"extra"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, strings.NewReader(""), &bytes.Buffer{})
			if err == nil {
				t.Fatal("run succeeded")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("run err = %v, want %v", err, tc.want)
			}
		})
	}
	bad := strings.NewReader(`{"t":1,"op":"depart","id":"x"}`)
	if err := run([]string{"-trace", "-"}, bad, &bytes.Buffer{}); err == nil {
		t.Fatal("bad trace on stdin accepted")
	}
}
