package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/placement/sim"
	"github.com/dynmig/dynmig/reservation"
)

func TestDiscover(t *testing.T) {
	r := migctl(t, "", "discover", "--fake", "2xA100-SXM4-40GB")
	r.check(t, exitOK, nil, nil)
	value := strings.TrimSuffix(r.stdout, "\n")
	devs, err := capability.DecodeNodeRegistration([]byte(value))
	if err != nil {
		t.Fatalf("output does not decode: %v", err)
	}
	if got, want := len(devs), 2; got != want {
		t.Fatalf("devices = %d, want %d", got, want)
	}
	again, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != value {
		t.Errorf("output is not the canonical wire encoding:\n got: %s\nwant: %s", value, again)
	}
	if got, want := devs[0].MIGProfiles[1].Name, "2g.10gb"; got != want {
		t.Errorf("second profile = %s, want %s", got, want)
	}
	if got, want := devs[0].MIGProfiles[1].Core, uint32(29); got != want {
		t.Errorf("2g.10gb core = %d, want %d (the spec's example)", got, want)
	}
}

func TestDiscoverNode(t *testing.T) {
	r := migctl(t, "", "discover", "--fake", "A100-SXM4-40GB,H100", "--node", "node-x")
	r.check(t, exitOK, nil, nil)
	var n corev1.Node
	if err := json.Unmarshal([]byte(r.stdout), &n); err != nil {
		t.Fatal(err)
	}
	if n.Name != "node-x" || n.Kind != "Node" {
		t.Errorf("node = %s %s, want Node node-x", n.Kind, n.Name)
	}
	devs, err := capability.DecodeNodeRegistration([]byte(n.Annotations[capability.NodeRegisterAnnotation]))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := devs[1].Type, "NVIDIA H100 80GB HBM3"; got != want {
		t.Errorf("GPU1 type = %q, want %q", got, want)
	}
	// The Node is usable by the other commands.
	path := writeTemp(t, "node.json", r.stdout)
	migctl(t, "", "status", "--node", path).check(t, exitOK, []string{"GPU1  [........]", "NVIDIA H100 80GB HBM3 x1"}, nil)
}

// TestDiscoverCorrectedTables: the presets publish the corrected tables
// through the default allowlist, and an unconfirmed one says so.
func TestDiscoverCorrectedTables(t *testing.T) {
	r := migctl(t, "", "discover", "--fake", "NVIDIA H100 PCIe,NVIDIA A800 80GB PCIe,NVIDIA RTX PRO 6000 Blackwell Workstation Edition,NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition,H20")
	r.check(t, exitOK, nil, []string{`note: preset "NVIDIA H20" is unconfirmed: SM counts estimated`})
	devs, err := capability.DecodeNodeRegistration([]byte(strings.TrimSpace(r.stdout)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(devs), 5; got != want {
		t.Fatalf("devices = %d, want %d", got, want)
	}
	core := map[string]uint32{}
	for _, p := range devs[0].MIGProfiles {
		core[p.Name] = p.Core
	}
	if core["2g.20gb"] != 27 || core["3g.40gb"] != 41 || core["1g.10gb"] != 13 {
		t.Errorf("H100 PCIe cores = %v, want 2g.20gb 27, 3g.40gb 41, 1g.10gb 13", core)
	}
	for _, d := range devs[1:4] {
		if len(d.MIGProfiles) < 3 {
			t.Errorf("%s publishes %d profiles, want at least 3", d.Type, len(d.MIGProfiles))
		}
	}
	if strings.Contains(r.stderr, "H100 PCIe\" is unconfirmed") {
		t.Errorf("confirmed preset noted as unconfirmed:\n%s", r.stderr)
	}
}

// TestDiscoverH200Driver580: the H200 preset is what driver 580.159.04
// reported on a real H200; the early driver's memory stays selectable.
func TestDiscoverH200Driver580(t *testing.T) {
	r := migctl(t, "", "discover", "--fake", "NVIDIA H200")
	r.check(t, exitOK, []string{`"2g.35gb","memoryMB":33280`, `"3g.71gb","memoryMB":71424`, `"7g.141gb","memoryMB":143360`}, nil)
	if strings.Contains(r.stderr, "unconfirmed") {
		t.Errorf("confirmed H200 preset noted as unconfirmed:\n%s", r.stderr)
	}
	r = migctl(t, "", "discover", "--fake", "NVIDIA H200", "--driver", "early")
	r.check(t, exitOK, []string{`"2g.35gb","memoryMB":33024`, `"3g.71gb","memoryMB":71168`, `"7g.141gb","memoryMB":143104`}, nil)
}

func TestDiscoverDriver(t *testing.T) {
	r := migctl(t, "", "discover", "--fake", "GB200", "--driver", "early")
	r.check(t, exitOK, []string{`"7g.189gb"`, `"3g.95gb"`}, nil)
	r = migctl(t, "", "discover", "--fake", "GB200")
	r.check(t, exitOK, []string{`"7g.186gb"`}, nil)
	migctl(t, "", "discover", "--fake", "GB200", "--driver", "old").check(t, exitUsage, nil, []string{`--driver "old"`})
}

func TestDiscoverErrors(t *testing.T) {
	onlyA30 := writeTemp(t, "a30.yaml", "nvidia:\n  migProfileAllowlist:\n  - models: [A30]\n    profiles: [1g.6gb]\n")
	only1g := writeTemp(t, "1g.yaml", "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-40GB]\n    profiles: [1g.5gb, 1g.5gb+me]\n")
	tests := []cliCase{
		{name: "no --fake", args: []string{"discover"}, code: exitUsage, inStderr: []string{"--fake is required"}},
		{name: "unknown model", args: []string{"discover", "--fake", "Z80"}, code: exitUsage, inStderr: []string{`unknown model "Z80"`, "NVIDIA A30"}},
		{name: "bad count", args: []string{"discover", "--fake", "99xA30"}, code: exitUsage, inStderr: []string{"count 99"}},
		{name: "GPU matching no allowlist entry", args: []string{"discover", "--fake", "A100", "--allowlist", onlyA30},
			code: exitInvalid, inStdout: []string{`"mode":"mig"`}, inStderr: []string{"finding: GPU 0", "matches no migProfileAllowlist entry, so it publishes no MIG profiles."}},
		{name: "custom allowlist with a variant", args: []string{"discover", "--fake", "A100", "--allowlist", only1g},
			code: exitOK, inStdout: []string{`"name":"1g.5gb+me"`}},
		{name: "legacy device config", args: []string{"discover", "--fake", "A100", "--allowlist", testdata("legacy-config.yaml")},
			code: exitInvalid, inStderr: []string{"convert-legacy"}},
		{name: "missing allowlist file", args: []string{"discover", "--fake", "A100", "--allowlist", "testdata/nope.yaml"},
			code: exitInvalid, inStderr: []string{"nope.yaml"}},
	}
	runCases(t, tests)
}

func TestValidate(t *testing.T) {
	spec := readTestdata(t, "spec-allocation.json")
	quoted, _ := json.Marshal(strings.TrimSpace(spec))
	unknownGPU := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-00000000-0000-4000-8000-000000000000","profile":"1g.5gb","placement":{"start":0,"size":1}}]`
	unpublished := `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + gpu0 + `","profile":"3g.20gb","placement":{"start":2,"size":4}}]`
	tests := []cliCase{
		{name: "spec example", args: []string{"validate", testdata("spec-allocation.json")}, code: exitOK,
			inStdout: []string{"valid: 1 entry, 1 realized, 0 not yet realized"}},
		{name: "spec example on stdin", args: []string{"validate", "-"}, stdin: spec, code: exitOK, inStdout: []string{"valid: 1 entry"}},
		{name: "stdin by default", args: []string{"validate"}, stdin: spec, code: exitOK, inStdout: []string{"valid: 1 entry"}},
		{name: "quoted value as kubectl jsonpath prints it", args: []string{"validate"}, stdin: string(quoted), code: exitOK, inStdout: []string{"valid: 1 entry"}},
		{name: "empty input", args: []string{"validate"}, stdin: "  \n", code: exitInvalid},
		{name: "against the node", args: []string{"validate", "--node", testdata("node.json"), testdata("spec-allocation.json")}, code: exitOK},
		{name: "design placeholder identifiers", args: []string{"validate", testdata("design-example.json")}, code: exitInvalid,
			inStdout: []string{`entry 0 field migUUID: malformed MIG UUID: "MIG-xxxxxxxx"`, "invalid: 1 problem"}},
		{name: "every problem listed", args: []string{"validate", testdata("invalid-allocations.json")}, code: exitInvalid,
			inStdout: []string{
				"entry 0 field gpuInstanceID: partial runtime identity",
				"entry 1 field deviceIndex: duplicate (containerIndex, deviceIndex)",
				"entry 1 field placement: overlapping placements",
				"entry 2 field profile: malformed profile name",
				"entry 2 field placement: invalid placement: size 0",
				"invalid: 5 problems",
			}},
		{name: "malformed JSON names the byte", args: []string{"validate"}, stdin: `[{"containerIndex":0,}]`, code: exitInvalid,
			inStdout: []string{"entry 0", "(byte "}},
		{name: "unknown GPU", args: []string{"validate", "--node", testdata("node.json")}, stdin: unknownGPU, code: exitInvalid,
			inStdout: []string{"entry 0 field gpuUUID: GPU not on the node"}},
		{name: "unpublished placement", args: []string{"validate", "--node", testdata("node.json")}, stdin: unpublished, code: exitInvalid,
			inStdout: []string{"entry 0 field placement: placement not published for the profile"}},
		{name: "kubectl List of pods", args: []string{"validate", testdata("pods.json")}, code: exitOK,
			inStdout: []string{"pod ml/infer-0: valid: 2 entries, 0 realized, 2 not yet realized", "pod ml/batch-0 (Succeeded, no longer counted): valid", "pod default/web-0: no hami.io/vgpu-mig-allocations"}},
		{name: "PodList", args: []string{"validate", testdata("podlist.json")}, code: exitOK, inStdout: []string{"pod ml/train-0: valid"}},
		{name: "one Pod", args: []string{"validate", testdata("pod.json")}, code: exitOK, inStdout: []string{"pod ml/dev-0: no hami.io"}},
		{name: "bad pods", args: []string{"validate", testdata("pods-bad.json")}, code: exitInvalid,
			inStdout: []string{
				"pod ml/broken-0: entry 0 field migUUID: partial runtime identity",
				`pod ml/legacy-0: hami.io/vgpu-devices-allocated container 0 device 0: legacy identifier "GPU-2c4e6a8b-1d3f-4a5b-8c7d-9e0f1a2b3c4d[0-3]"`,
				"pods ml/train-0 and ml/thief-0: entry 0 and entry 0: overlapping placements",
				"invalid: 3 problems",
			}},
		{name: "a Node is not a pod", args: []string{"validate", testdata("node.json")}, code: exitInvalid, inStderr: []string{`kind "Node"`}},
		{name: "missing file", args: []string{"validate", "testdata/nope.json"}, code: exitInvalid, inStderr: []string{"nope.json"}},
		{name: "two files", args: []string{"validate", "a", "b"}, code: exitUsage, inStderr: []string{"want one file"}},
		{name: "both on stdin", args: []string{"validate", "--node", "-", "-"}, code: exitUsage, inStderr: []string{"standard input"}},
	}
	runCases(t, tests)
}

func TestValidateDuplicateUID(t *testing.T) {
	a := podJSON("a", "mig-node-a", "Running", []reservation.Allocation{entry(gpu0, "1g.5gb", 0, 1)}, 4864)
	b := podJSON("b", "mig-node-a", "Running", []reservation.Allocation{entry(gpu1, "1g.5gb", 0, 1)}, 4864)
	b["metadata"].(map[string]any)["uid"] = "uid-a"
	migctl(t, listJSON(t, a, b), "validate").check(t, exitInvalid, []string{"pod test/b (uid-a): pod UID missing or shared with another pod"}, nil)
}

func TestValidateYAML(t *testing.T) {
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: yaml-pod\n  namespace: ml\n  uid: u1\n  annotations:\n    hami.io/vgpu-mig-allocations: '" +
		strings.TrimSpace(readTestdata(t, "spec-allocation.json")) + "'\nspec:\n  containers:\n  - name: c\n    resources:\n      limits:\n        nvidia.com/gpu: 1\nstatus:\n  phase: Running\n"
	migctl(t, pod, "validate").check(t, exitOK, []string{"pod ml/yaml-pod: valid: 1 entry"}, nil)
}

func TestPlace(t *testing.T) {
	node, pods := testdata("node.json"), testdata("pods.json")
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string // exact, when set
		inStderr []string
	}{
		{name: "default policy", args: []string{"place", "--node", node, "--pods", pods, "--pod", testdata("pod.json")}, code: exitOK,
			stdout:   `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + gpu1 + `","profile":"2g.10gb","placement":{"start":2,"size":2}}]` + "\n",
			inStderr: []string{"c0/d0 -> GPU1 " + gpu1 + " 2g.10gb [2,4)"}},
		{name: "PodList gives the same", args: []string{"place", "--node", node, "--pods", testdata("podlist.json"), "--pod", testdata("pod.json")}, code: exitOK,
			stdout: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + gpu1 + `","profile":"2g.10gb","placement":{"start":2,"size":2}}]` + "\n"},
		{name: "v2.10 policy", args: []string{"place", "--node", node, "--pods", pods, "--pod", testdata("pod.json"), "--policy", "v2.10"}, code: exitOK,
			stdout: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + gpu0 + `","profile":"2g.10gb","placement":{"start":0,"size":2}}]` + "\n"},
		{name: "empty node", args: []string{"place", "--node", node, "--pod", testdata("pod.json"), "--policy", "first-fit"}, code: exitOK,
			stdout: `[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + gpu0 + `","profile":"2g.10gb","placement":{"start":0,"size":2}}]` + "\n"},
		{name: "whole GPU does not fit", args: []string{"place", "--node", node, "--pods", pods, "--pod", testdata("pod-whole.json")}, code: exitUnschedulable,
			inStderr: []string{"pod ml/whole-0 is unschedulable on node mig-node-a: not enough free slots: container 0 device 0 (40192 MiB) needs 8 slots, the closest GPU has 6 free", "GPU1 free 6/8 slots"}},
		{name: "not a MIG pod", args: []string{"place", "--node", node, "--pods", pods, "--pod", testdata("pod-nomig.json")}, code: exitInvalid,
			inStderr: []string{"does not opt in to MIG"}},
		{name: "unknown policy", args: []string{"place", "--node", node, "--pod", testdata("pod.json"), "--policy", "best"}, code: exitUsage,
			inStderr: []string{`unknown policy "best"`, "first-fit, v2.10, frag-aware"}},
		{name: "no --pod", args: []string{"place", "--node", node}, code: exitUsage, inStderr: []string{"--pod is required"}},
		{name: "no --node", args: []string{"place", "--pod", testdata("pod.json")}, code: exitUsage, inStderr: []string{"--node is required"}},
		{name: "several pods to place", args: []string{"place", "--node", node, "--pod", pods}, code: exitInvalid, inStderr: []string{"want exactly one"}},
		{name: "malformed node", args: []string{"place", "--node", testdata("pods.json"), "--pod", testdata("pod.json")}, code: exitInvalid,
			inStderr: []string{"no Node in the input"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := migctl(t, "", tt.args...)
			r.check(t, tt.code, nil, tt.inStderr)
			if tt.stdout != "" && r.stdout != tt.stdout {
				t.Errorf("stdout = %q, want %q", r.stdout, tt.stdout)
			}
		})
	}
}

// TestPlaceFragmented fills both GPUs with 1g devices on every other slot:
// half the slots are free, but no 2g placement is, so a 2g pod waits.
func TestPlaceFragmented(t *testing.T) {
	var items []map[string]any
	for _, gpu := range []string{gpu0, gpu1} {
		for start := uint32(0); start < 8; start += 2 {
			items = append(items, podJSON(gpu[:12]+"-"+string(rune('a'+start)), "mig-node-a", "Running",
				[]reservation.Allocation{entry(gpu, "1g.5gb", start, 1)}, 4864))
		}
	}
	pods := writeTemp(t, "pods.json", listJSON(t, items...))
	pod := writeTemp(t, "pod.json", listJSON(t, podJSON("wide", "", "Pending", nil, 9856)))
	r := migctl(t, "", "place", "--node", testdata("node.json"), "--pods", pods, "--pod", pod)
	r.check(t, exitUnschedulable, nil, []string{"unschedulable on node mig-node-a: fragmented: free slots, but no free legal placement: container 0 device 0 (9856 MiB) needs 2 slots, the closest GPU has 3 free"})
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
	migctl(t, "", "status", "--node", testdata("node.json"), "--pods", pods).check(t, exitOK,
		[]string{"[a|.|b|.|c|.|d|.]", "free 4/8 slots, capacity 3, largest fit 1g.5gb, 1 unusable"}, nil)
}

// TestPlaceResultIsValid checks the placed entries against the node and the
// reservations already there.
func TestPlaceResultIsValid(t *testing.T) {
	r := migctl(t, "", "place", "--node", testdata("node.json"), "--pods", testdata("pods.json"), "--pod", testdata("pod.json"))
	r.check(t, exitOK, nil, nil)
	migctl(t, r.stdout, "validate", "--node", testdata("node.json")).check(t, exitOK, []string{"valid: 1 entry, 0 realized"}, nil)
	placed, err := reservation.DecodeString(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []corev1.Pod }
	if err := json.Unmarshal([]byte(readTestdata(t, "pods.json")), &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.Spec.NodeName != "mig-node-a" || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		others, _ := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
		for _, o := range others {
			if o.GPUUUID == placed[0].GPUUUID && o.Placement.Overlaps(placed[0].Placement) {
				t.Errorf("placed %v overlaps %s's %v", placed[0].Placement, p.Name, o.Placement)
			}
		}
	}
}

func TestStatus(t *testing.T) {
	node := testdata("node.json")
	reg := writeTemp(t, "reg.json", nodeAnnotation(t))
	tests := []cliCase{
		{name: "kubectl List", args: []string{"status", "--node", node, "--pods", testdata("pods.json")}, code: exitOK,
			inStdout: []string{
				"node mig-node-a: 2 MIG GPUs (NVIDIA A100-SXM4-40GB x2), 3 active pods hold 4 reservations (2 realized, 2 not yet), 1 pending MIG pod",
				"GPU0  [..|aa|bbbb]  free 2/8 slots, capacity 3, largest fit 2g.10gb  " + gpu0,
				"GPU1  [c|c|......]  free 6/8 slots, capacity 8, largest fit 3g.20gb",
				"node: free 8/16 slots, capacity 11, largest fit 3g.20gb, 0 unusable",
				"a  ml/train-0     c0/d0  GPU0  2g.10gb  [2,4)  realized MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d gi=4 ci=0",
				"c  ml/infer-0     c1/d0  GPU1  1g.5gb   [1,2)  reserved, not realized yet",
				"ml/waiting-0: fits now: c0/d0 GPU1 3g.20gb [4,8)",
			}},
		{name: "PodList", args: []string{"status", "--node", node, "--pods", testdata("podlist.json")}, code: exitOK,
			inStdout: []string{"GPU0  [..|aa|bbbb]"}},
		{name: "problems", args: []string{"status", "--node", node, "--pods", testdata("pods-bad.json")}, code: exitInvalid,
			inStdout: []string{"GPU0  [bb|!!|....]", "problems:", "pods ml/train-0 and ml/thief-0", "partial runtime identity", "legacy identifier"}},
		{name: "no pods", args: []string{"status", "--node", node}, code: exitOK,
			inStdout: []string{"0 active pods hold 0 reservations", "GPU0  [........]  free 8/8 slots, capacity 13, largest fit 7g.40gb"}},
		{name: "bare registration value", args: []string{"status", "--node", reg, "--node-name", "reg"}, code: exitOK,
			inStdout: []string{"node reg: 2 MIG GPUs"}},
		{name: "pending pod that does not fit", args: []string{"status", "--node", node, "--pods", testdata("pods.json"), "--policy", "first-fit"}, code: exitOK,
			inStdout: []string{"pending MIG pods (policy first-fit):"}},
	}
	runCases(t, tests)
}

func TestStatusPendingDoesNotFit(t *testing.T) {
	var list map[string]any
	if err := json.Unmarshal([]byte(readTestdata(t, "pods.json")), &list); err != nil {
		t.Fatal(err)
	}
	list["items"] = append(list["items"].([]any), podJSON("whole", "", "Pending", nil, 0))
	b, _ := json.Marshal(list)
	pods := writeTemp(t, "pods.json", string(b))
	migctl(t, "", "status", "--node", testdata("node.json"), "--pods", pods).check(t, exitOK, []string{
		"2 pending MIG pods",
		"test/whole: does not fit: not enough free slots: container 0 device 0 (40192 MiB) needs 8 slots, the closest GPU has 6 free",
		"ml/waiting-0: fits now",
	}, nil)
}

func TestStatusNodeList(t *testing.T) {
	var n map[string]any
	if err := json.Unmarshal([]byte(readTestdata(t, "node.json")), &n); err != nil {
		t.Fatal(err)
	}
	other := map[string]any{"kind": "Node", "apiVersion": "v1", "metadata": map[string]any{"name": "cpu-node"}}
	list, _ := json.Marshal(map[string]any{"kind": "NodeList", "apiVersion": "v1", "items": []any{other, n}})
	path := writeTemp(t, "nodes.json", string(list))
	migctl(t, "", "status", "--node", path).check(t, exitUsage, nil, []string{"2 nodes in the input (cpu-node, mig-node-a)", "--node-name"})
	migctl(t, "", "status", "--node", path, "--node-name", "mig-node-a").check(t, exitOK, []string{"node mig-node-a: 2 MIG GPUs"}, nil)
	migctl(t, "", "status", "--node", path, "--node-name", "gpu-9").check(t, exitInvalid, nil, []string{`no node "gpu-9"`})
}

func nodeAnnotation(t *testing.T) string {
	t.Helper()
	var n corev1.Node
	if err := json.Unmarshal([]byte(readTestdata(t, "node.json")), &n); err != nil {
		t.Fatal(err)
	}
	return n.Annotations[capability.NodeRegisterAnnotation]
}

func TestMetrics(t *testing.T) {
	r := migctl(t, "", "metrics", "--node", testdata("node.json"), "--pods", testdata("pods.json"))
	r.check(t, exitOK, []string{
		`# TYPE hami_node_gpu_mig_instance_info gauge`,
		`hami_node_gpu_mig_instance_info{compute_instance_id="0",device_index="0",device_uuid="` + gpu0 + `",gpu_instance_id="4",mig_uuid="MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d",node="mig-node-a",placement_size="2",placement_start="2",profile="2g.10gb"} 1`,
	}, nil)
	families := parseExposition(t, r.stdout)
	if got, want := len(families[reservation.MetricInstanceInfo].GetMetric()), 2; got != want {
		t.Errorf("series = %d, want %d (the realized reservations of active pods on the node)", got, want)
	}
	if _, ok := families[reservation.MetricLegacyInstance]; ok {
		t.Error("legacy metric exported without --legacy")
	}

	r = migctl(t, "", "metrics", "--node", testdata("node.json"), "--pods", testdata("podlist.json"), "--legacy")
	r.check(t, exitOK, []string{`nodeGPUMigInstance{deviceidx="0",deviceuuid="` + gpu0 + `",migname="2g.10gb-4",nodeid="mig-node-a"} 1`}, nil)

	// Untrusted records produce no series, trusted ones still do.
	r = migctl(t, "", "metrics", "--node", testdata("node.json"), "--pods", testdata("pods-bad.json"))
	r.check(t, exitOK, nil, nil)
	if strings.Contains(r.stdout, "hami_node_gpu_mig_instance_info{") {
		t.Errorf("conflicting records exported:\n%s", r.stdout)
	}

	migctl(t, "", "metrics", "--node", testdata("node.json")).check(t, exitOK, nil, nil)
	migctl(t, "", "metrics").check(t, exitUsage, nil, []string{"--node is required"})
}

func parseExposition(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, text)
	}
	return fams
}

func TestDefaults(t *testing.T) {
	for _, args := range [][]string{{"defaults"}, {"defaults", "--json"}} {
		r := migctl(t, "", args...)
		r.check(t, exitOK, []string{"migProfileAllowlist", "NVIDIA A100-SXM4-40GB"}, nil)
		cfg, err := capability.ParseDeviceConfig([]byte(r.stdout))
		if err != nil {
			t.Fatalf("%v: output does not parse: %v", args, err)
		}
		if got, want := len(cfg.Allowlist), len(capability.DefaultAllowlist()); got != want {
			t.Errorf("%v: %d entries, want %d", args, got, want)
		}
		if !cfg.Allowlist.Allows("NVIDIA H100 80GB HBM3", "3g.40gb") {
			t.Errorf("%v: H100 3g.40gb not allowed", args)
		}
	}
}

// TestChartNamesResolved: the HAMi chart's 7g.79gb is A100 80GB's
// 7g.80gb. Config loading and convert-legacy print the resolution, and
// discovery publishes the full-GPU profile under the driver's name.
func TestChartNamesResolved(t *testing.T) {
	chart := writeTemp(t, "chart.yaml", "nvidia:\n  migProfileAllowlist:\n  - models: [A100-SXM4-80GB]\n    profiles: [1g.10gb, 7g.79gb]\n")
	r := migctl(t, "", "discover", "--fake", "NVIDIA A100-SXM4-80GB", "--allowlist", chart)
	r.check(t, exitOK, []string{`"name":"7g.80gb"`}, []string{
		`migProfileAllowlist[0]: 7g.79gb resolves to the driver's 7g.80gb on "NVIDIA A100-SXM4-80GB"`,
		"knows the profile 7g.79gb (named in migProfileAllowlist[0]) as 7g.80gb"})
	legacy := writeTemp(t, "legacy.yaml", "nvidia:\n  knownMigGeometries:\n  - models: [A100-SXM4-80GB]\n    allowedGeometries:\n    - - name: 7g.79gb\n        memory: 80896\n        count: 1\n")
	r = migctl(t, "", "convert-legacy", legacy)
	r.check(t, exitOK, []string{"7g.79gb"}, []string{`migProfileAllowlist[0]: 7g.79gb resolves to the driver's 7g.80gb on "NVIDIA A100-SXM4-80GB"`})
}

func TestConvertLegacy(t *testing.T) {
	r := migctl(t, "", "convert-legacy", testdata("legacy-config.yaml"))
	r.check(t, exitOK, nil, nil)
	cfg, err := capability.ParseDeviceConfig([]byte(r.stdout))
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, r.stdout)
	}
	if !cfg.Allowlist.Allows("NVIDIA A100-SXM4-40GB", "3g.20gb") || !cfg.Allowlist.Allows("NVIDIA A30", "2g.12gb") {
		t.Errorf("converted allowlist lacks profiles:\n%s", r.stdout)
	}
	if cfg.Allowlist.Allows("NVIDIA A30", "4g.24gb") {
		t.Errorf("converted allowlist allows a profile no geometry named")
	}

	tests := []cliCase{
		{name: "lossy", args: []string{"convert-legacy", testdata("legacy-config-lossy.yaml")}, code: exitInvalid,
			inStdout: []string{"1g.5gb"}, inStderr: []string{"not profile names: MIG 2g.10gb", `empty or duplicate models: [""]`}},
		{name: "stdin, JSON out", args: []string{"convert-legacy", "--json", "-"}, stdin: readTestdata(t, "legacy-config.yaml"), code: exitOK,
			inStdout: []string{`"migProfileAllowlist"`}},
		{name: "not legacy", args: []string{"convert-legacy", "-"}, stdin: "nvidia:\n  migProfileAllowlist: []\n", code: exitInvalid,
			inStderr: []string{"knownMigGeometries"}},
		{name: "no file", args: []string{"convert-legacy"}, code: exitUsage, inStderr: []string{"want exactly one FILE"}},
	}
	runCases(t, tests)
}

func TestSimulate(t *testing.T) {
	r := migctl(t, "", "simulate", "--trace", testdata("trace.jsonl"), "--gpus", "2", "--json")
	r.check(t, exitOK, nil, nil)
	var rs []sim.Result
	if err := json.Unmarshal([]byte(r.stdout), &rs); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	if got, want := len(rs), 3; got != want {
		t.Fatalf("results = %d, want %d", got, want)
	}
	for _, res := range rs {
		if res.Arrivals != 7 || res.Accepted+res.Rejected() != 7 {
			t.Errorf("%s: arrivals %d accepted %d, want 7 arrivals", res.Policy, res.Arrivals, res.Accepted)
		}
	}

	tracePath := filepath.Join(t.TempDir(), "trace.jsonl")
	r = migctl(t, "", "simulate", "--synthetic", "3", "--arrivals", "200", "--gpus", "4", "--model", "H100", "--write-trace", tracePath)
	r.check(t, exitOK, []string{"4 x NVIDIA H100 80GB HBM3, profiles 1g.10gb 2g.20gb 3g.40gb 7g.80gb, 400 events", "first-fit", "v2.10", "frag-aware", "rej fragmentation"}, nil)
	f, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := sim.ReadTrace(f)
	if err != nil || len(evs) != 400 {
		t.Errorf("written trace: %d events, %v; want 400", len(evs), err)
	}
	// The written trace replays to the same table.
	again := migctl(t, "", "simulate", "--trace", tracePath, "--gpus", "4", "--model", "H100")
	if again.stdout != r.stdout {
		t.Errorf("replaying the written trace differs:\n%s\nvs\n%s", again.stdout, r.stdout)
	}

	tests := []cliCase{
		{name: "one policy", args: []string{"simulate", "--synthetic", "1", "--arrivals", "50", "--policy", "v210"}, code: exitOK,
			inStdout: []string{"v2.10"}},
		{name: "trace on stdin", args: []string{"simulate", "--trace", "-", "--gpus", "1"}, stdin: readTestdata(t, "trace.jsonl"), code: exitOK,
			inStdout: []string{"1 x NVIDIA A100-SXM4-40GB, profiles 1g.5gb 2g.10gb 3g.20gb 7g.40gb, 9 events"}},
		{name: "neither trace nor seed", args: []string{"simulate"}, code: exitUsage, inStderr: []string{"exactly one of --trace"}},
		{name: "both", args: []string{"simulate", "--trace", "x", "--synthetic", "1"}, code: exitUsage},
		{name: "bad seed", args: []string{"simulate", "--synthetic", "abc"}, code: exitUsage, inStderr: []string{"unsigned integer"}},
		{name: "bad mix", args: []string{"simulate", "--synthetic", "1", "--mix", "heavy"}, code: exitUsage},
		{name: "unknown model", args: []string{"simulate", "--synthetic", "1", "--model", "Z80"}, code: exitUsage, inStderr: []string{`unknown model "Z80"`}},
		{name: "bad GPU count", args: []string{"simulate", "--synthetic", "1", "--gpus", "0"}, code: exitUsage},
		{name: "bad trace names the line", args: []string{"simulate", "--trace", "-"}, stdin: "{\"t\":0,\"op\":\"arrive\",\"id\":\"a\"}\n{\"t\":1,\"op\":\"leave\",\"id\":\"a\"}\n",
			code: exitInvalid, inStderr: []string{"line 2"}},
	}
	runCases(t, tests)
}

// TestNodeWithoutMIG: a node that cannot take MIG pods is reported as
// such, with what is missing, and exit 1, by every command that reads one.
func TestNodeWithoutMIG(t *testing.T) {
	bare := writeTemp(t, "bare.json", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}`)
	hamiCore := writeTemp(t, "hami.json", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","annotations":{"hami.io/node-nvidia-register":`+
		`"[{\"id\":\"GPU-a\",\"index\":0,\"count\":10,\"devmem\":40960,\"devcore\":100,\"type\":\"NVIDIA A100-SXM4-40GB\",\"mode\":\"hami-core\",\"health\":true}]"}}}`)
	pod := testdata("pod.json")
	var tests []cliCase
	for _, node := range []struct{ name, file, want string }{
		{"no registration", bare, "no hami.io/node-nvidia-register annotation"},
		{"no GPU in MIG mode", hamiCore, "none in MIG mode"},
	} {
		tests = append(tests,
			cliCase{name: "status: " + node.name, args: []string{"status", "--node", node.file}, code: exitInvalid, inStderr: []string{node.want}},
			cliCase{name: "place: " + node.name, args: []string{"place", "--node", node.file, "--pod", pod}, code: exitInvalid, inStderr: []string{node.want}},
			cliCase{name: "metrics: " + node.name, args: []string{"metrics", "--node", node.file}, code: exitInvalid, inStderr: []string{node.want}},
		)
	}
	runCases(t, tests)
}

// TestValidateInputErrors: empty and non-object input is refused with a
// message that names no Go type.
func TestValidateInputErrors(t *testing.T) {
	for _, tt := range []cliCase{
		{name: "empty", args: []string{"validate"}, stdin: "", code: exitInvalid, inStderr: []string{"standard input is empty"}},
		{name: "not JSON", args: []string{"validate"}, stdin: "not json\n", code: exitInvalid, inStderr: []string{"not a Kubernetes object"}},
		{name: "wrong type", args: []string{"validate"}, stdin: `{"kind":"Pod","metadata":"x"}`, code: exitInvalid, inStderr: []string{`"metadata"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := migctl(t, tt.stdin, tt.args...)
			r.check(t, tt.code, nil, tt.inStderr)
			if strings.Contains(r.stderr, "Go value") || strings.Contains(r.stderr, "main.") {
				t.Errorf("stderr names a Go type: %s", r.stderr)
			}
		})
	}
}

// TestValidateOtherNodesPods: with --node, a pod bound to another node is
// checked on its own, not reported as using GPUs the node lacks.
func TestValidateOtherNodesPods(t *testing.T) {
	other := writeTemp(t, "other.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ml","uid":"u1","annotations":{"hami.io/vgpu-mig-allocations":`+
		`"[{\"containerIndex\":0,\"deviceIndex\":0,\"gpuUUID\":\"GPU-00000000-0000-4000-8000-000000000000\",\"profile\":\"1g.5gb\",\"placement\":{\"start\":0,\"size\":1}}]"}},`+
		`"spec":{"nodeName":"elsewhere","containers":[{"name":"c","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}`)
	migctl(t, "", "validate", "--node", testdata("node.json"), other).check(t, exitOK, []string{"bound to node elsewhere", "valid: 1 entry"}, nil)
}

// TestSimulateProfiles: --profiles chooses the allowlist's, the plain or
// every profile of the model.
func TestSimulateProfiles(t *testing.T) {
	runCases(t, []cliCase{
		{name: "plain", args: []string{"simulate", "--synthetic", "1", "--arrivals", "20", "--profiles", "plain"}, code: exitOK,
			inStdout: []string{"profiles 1g.5gb 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb,"}},
		{name: "all", args: []string{"simulate", "--synthetic", "1", "--arrivals", "20", "--profiles", "all"}, code: exitOK,
			inStdout: []string{"1g.5gb+me"}},
		{name: "unknown", args: []string{"simulate", "--synthetic", "1", "--profiles", "some"}, code: exitUsage, inStderr: []string{"--profiles"}},
	})
}
