package main

import (
	"encoding/json"
	"testing"

	"github.com/dynmig/dynmig/reservation"
)

// TestTrustRule: validate, status and place apply the scheduler's trust
// rule. A record on a pod that requests no MIG device, and the entries of
// a container whose request they do not match, occupy nothing: status
// draws no slot for them, place puts a pod where they claim, and all
// three report them as occupying nothing.
func TestTrustRule(t *testing.T) {
	node := testdata("node.json") // two A100-SXM4-40GB, GPU0 and GPU1
	// Requests no MIG device, yet claims the whole of GPU0.
	forged := podJSON("forged", "mig-node-a", "Running", []reservation.Allocation{entry(gpu0, "7g.40gb", 0, 8)})
	// Requests one device; its record holds two entries for that container.
	two := []reservation.Allocation{entry(gpu1, "3g.20gb", 0, 4), entry(gpu1, "3g.20gb", 4, 4)}
	two[1].DeviceIndex = 1
	mismatched := podJSON("mismatched", "mig-node-a", "Running", two, 19968)
	pods := writeTemp(t, "pods.json", listJSON(t, forged, mismatched))

	migctl(t, "", "validate", "--node", node, pods).check(t, exitInvalid, []string{
		"pod test/forged: entry 0 field containerIndex: occupies nothing, its container does not request it: container 0 requests no MIG device",
		"pod test/mismatched: entry 0 field deviceIndex: occupies nothing",
		"pod test/mismatched: entry 1 field deviceIndex: occupies nothing",
	}, nil)

	migctl(t, "", "status", "--node", node, "--pods", pods).check(t, exitInvalid, []string{
		"GPU0  [........]", "GPU1  [........]", "0 active pods hold 0 reservations",
		"pod test/forged: entry 0 field containerIndex: occupies nothing",
		"pod test/mismatched: entry 1 field deviceIndex: occupies nothing",
	}, nil)

	whole, err := json.Marshal(podJSON("new", "", "Pending", nil, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	newPod := writeTemp(t, "new.json", string(whole))
	migctl(t, "", "place", "--node", node, "--pods", pods, "--pod", newPod).check(t, exitOK,
		[]string{`"gpuUUID":"` + gpu0 + `","profile":"7g.40gb"`, `"gpuUUID":"` + gpu1 + `","profile":"7g.40gb"`}, []string{"pod test/forged: entry 0 field containerIndex: occupies nothing"})
}
