package kube_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
)

// NodeBinds: one pod binds to a node at a time; the holder may claim
// again; a release by another pod leaves the claim alone.
func TestNodeBindsClaim(t *testing.T) {
	var b kube.NodeBinds
	steps := []struct {
		op         string // "claim" or "release"
		node, uid  string
		wantHolder string
		wantOK     bool
	}{
		{op: "claim", node: "n1", uid: "a", wantHolder: "a", wantOK: true},
		{op: "claim", node: "n1", uid: "b", wantHolder: "a"},
		{op: "claim", node: "n1", uid: "a", wantHolder: "a", wantOK: true},
		{op: "claim", node: "n2", uid: "b", wantHolder: "b", wantOK: true},
		{op: "release", node: "n1", uid: "b"},
		{op: "claim", node: "n1", uid: "c", wantHolder: "a"},
		{op: "release", node: "n1", uid: "a"},
		{op: "claim", node: "n1", uid: "c", wantHolder: "c", wantOK: true},
	}
	for i, s := range steps {
		if s.op == "release" {
			b.Release(s.node, s.uid)
			continue
		}
		holder, ok := b.Claim(s.node, s.uid)
		assert.Equal(t, s.wantHolder, holder, "step %d", i)
		assert.Equal(t, s.wantOK, ok, "step %d", i)
	}
}

// Blocker: another pod's bind on the node blocks before any claim is
// looked at; the pod's own bind does not; otherwise Blocking decides.
func TestNodeBindsBlocker(t *testing.T) {
	now := time.Unix(1000, 0)
	young := kube.NodeClaim{Pod: reservation.PodRef{Namespace: "ns", Name: "young", UID: "young"}, Since: now.Add(-time.Second), Pending: []int{1}}
	req := &placement.Request{Containers: []placement.ContainerRequest{{Devices: 1}}}
	tests := []struct {
		name    string
		binding string // UID holding node n, "" for none
		claims  []kube.NodeClaim
		want    kube.Holder
		wantOK  bool
	}{
		{name: "free"},
		{name: "another pod binding", binding: "other", claims: []kube.NodeClaim{young}, want: kube.Holder{Binding: "other"}, wantOK: true},
		{name: "own bind, claim blocks", binding: "p", claims: []kube.NodeClaim{young}, want: kube.Holder{Claim: young}, wantOK: true},
		{name: "own bind, no claim", binding: "p"},
		{name: "claim only", claims: []kube.NodeClaim{young}, want: kube.Holder{Claim: young}, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b kube.NodeBinds
			if tt.binding != "" {
				b.Claim("n", tt.binding)
			}
			b.Claim("elsewhere", "other2")
			got, ok := b.Blocker("n", "p", req, tt.claims, now, time.Minute, nil)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}
