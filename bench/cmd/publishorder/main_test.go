package main

import (
	"context"
	"strings"
	"testing"
)

func TestRunShort(t *testing.T) {
	var b strings.Builder
	err := run(context.Background(), &b, config{seeds: "1", arrivals: 40, models: "A30", dra: true, shuffle: 1, perTrace: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"refreshed", "per-GPU", "nvidia", "every replay matched the allocator", "by-profile", "writes / republication"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, cfg := range []config{{seeds: "x", models: "A30"}, {seeds: "1", models: "nope"}} {
		if err := run(context.Background(), &strings.Builder{}, cfg); err == nil {
			t.Errorf("run(%+v) succeeded", cfg)
		}
	}
}
