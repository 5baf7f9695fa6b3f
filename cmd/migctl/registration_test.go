package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/reservation"
)

// nodeWith writes testdata/node.json with its registration value changed
// by edit, and returns the Node file and the bare value file.
func nodeWith(t *testing.T, edit func(value string) string) (nodeFile, valueFile string) {
	t.Helper()
	var n corev1.Node
	if err := json.Unmarshal([]byte(readTestdata(t, "node.json")), &n); err != nil {
		t.Fatal(err)
	}
	value := edit(n.Annotations[capability.NodeRegisterAnnotation])
	n.Annotations[capability.NodeRegisterAnnotation] = value
	b, err := json.Marshal(&n)
	if err != nil {
		t.Fatal(err)
	}
	return writeTemp(t, "node.json", string(b)), writeTemp(t, "reg.json", value)
}

// unhealthy drops the "health" key of the n-th GPU (0 or 1) of node.json,
// as the deployed device plugin writes an unhealthy GPU.
func unhealthy(n int) func(string) string {
	return func(v string) string {
		const key = `,"health":true}`
		i := strings.Index(v, key)
		if n == 1 {
			i = strings.LastIndex(v, key)
		}
		return v[:i] + "}" + v[i+len(key):]
	}
}

func TestUnhealthyGPUWithoutHealthKey(t *testing.T) {
	node1, value1 := nodeWith(t, unhealthy(1))
	node0, _ := nodeWith(t, unhealthy(0))
	pods, pod := testdata("pods.json"), testdata("pod.json")
	tests := []cliCase{
		{name: "status marks GPU1 and leaves it out of the node's totals",
			args: []string{"status", "--node", node1, "--pods", pods}, code: exitOK,
			inStdout: []string{
				"node mig-node-a: 2 MIG GPUs (NVIDIA A100-SXM4-40GB x2, 1 unhealthy)",
				"GPU1  [c|c|......]  unhealthy, no new pods (free 6/8 slots",
				"node: free 2/8 slots, capacity 3, largest fit 2g.10gb, 0 unusable",
				"c  ml/infer-0     c1/d0  GPU1  1g.5gb   [1,2)  reserved, not realized yet",
				"ml/waiting-0: does not fit",
			}},
		{name: "status of the bare value", args: []string{"status", "--node", value1, "--node-name", "reg"}, code: exitOK,
			inStdout: []string{"node reg: 2 MIG GPUs (NVIDIA A100-SXM4-40GB x2, 1 unhealthy)"}},
		{name: "status of GPU 0 written without index or health", args: []string{"status", "--node", node0, "--pods", pods}, code: exitOK,
			inStdout: []string{"GPU0  [..|aa|bbbb]  unhealthy, no new pods", "ml/waiting-0: fits now: c0/d0 GPU1 3g.20gb [4,8)"}},
		// On a healthy node the default policy puts this pod on GPU1 [2,4).
		{name: "place chooses the healthy GPU", args: []string{"place", "--node", node1, "--pods", pods, "--pod", pod}, code: exitOK,
			inStdout: []string{`"gpuUUID":"` + gpu0 + `","profile":"2g.10gb","placement":{"start":0,"size":2}`}},
		{name: "place with every GPU unhealthy", args: []string{"place", "--node", editedNode(t, unhealthy(0), unhealthy(1)), "--pod", pod},
			code: exitUnschedulable, inStderr: []string{"every GPU excluded by the pod's constraints or unhealthy"}},
		{name: "metrics still exports the pods on the unhealthy GPU", args: []string{"metrics", "--node", node0, "--pods", pods}, code: exitOK,
			inStdout: []string{`device_index="0",device_uuid="` + gpu0 + `",gpu_instance_id="4"`}},
	}
	runCases(t, tests)

	r := migctl(t, "", "metrics", "--node", node0, "--pods", pods)
	if got, want := len(parseExposition(t, r.stdout)[reservation.MetricInstanceInfo].GetMetric()), 2; got != want {
		t.Errorf("series = %d, want %d, as on a healthy node", got, want)
	}
}

// editedNode is nodeWith applying several edits, returning the Node file.
func editedNode(t *testing.T, edits ...func(string) string) string {
	t.Helper()
	f, _ := nodeWith(t, func(v string) string {
		for _, e := range edits {
			v = e(v)
		}
		return v
	})
	return f
}

func TestRegistrationEntryLeftOut(t *testing.T) {
	// GPU1's devcore becomes a string: that entry is malformed, GPU0 stays.
	malformed := editedNode(t, func(v string) string {
		i := strings.LastIndex(v, `"devcore":100`)
		return v[:i] + `"devcore":"100"` + v[i+len(`"devcore":100`):]
	})
	// GPU0's 7g profile published without placements, as the deployed
	// plugin writes it when NVML reports none.
	noPlacement := editedNode(t, func(v string) string {
		return strings.Replace(v, `"sliceCount":7,"placements":[{"start":0,"size":8}]`, `"sliceCount":7,"placements":null`, 1)
	})
	pods, pod := testdata("pods.json"), testdata("pod.json")
	tests := []cliCase{
		{name: "status lists the entry as a problem and shows the other GPU",
			args: []string{"status", "--node", malformed}, code: exitInvalid,
			inStdout: []string{"node mig-node-a: 1 MIG GPU", "GPU0  [........]", "problems:",
				"node mig-node-a: registration entry 1 left out, its GPU gets no MIG pods", "device 1 devcore"}},
		{name: "place uses the other GPU and warns", args: []string{"place", "--node", malformed, "--pod", pod, "--policy", "first-fit"}, code: exitOK,
			inStdout: []string{`"gpuUUID":"` + gpu0 + `"`}, inStderr: []string{"warning: node mig-node-a: registration entry 1 left out"}},
		{name: "metrics warns", args: []string{"metrics", "--node", malformed, "--pods", pods}, code: exitOK,
			inStderr: []string{"registration entry 1 left out"}},
		{name: "status notes a profile without placements", args: []string{"status", "--node", noPlacement}, code: exitOK,
			inStdout: []string{"notes:", "migProfiles[3].placements: profile 7g.40gb publishes no placement",
				"free 8/8 slots, capacity 12, largest fit 3g.20gb"}},
		{name: "malformed array refuses the node", args: []string{"status", "--node", writeTemp(t, "reg.json", `[{"id":"GPU-a"},`)},
			code: exitInvalid, inStderr: []string{"node registration array"}},
	}
	runCases(t, tests)
}

func TestValidateRefusesObjectsThatAreNotKubernetes(t *testing.T) {
	one := `{"containerIndex":0,"deviceIndex":0,"gpuUUID":"` + gpu0 + `","profile":"1g.5gb","placement":{"start":0,"size":1}}`
	tests := []cliCase{
		{name: "one allocation entry, not an array", args: []string{"validate"}, stdin: one, code: exitInvalid,
			inStderr: []string{`without "kind"`, "want a hami.io/vgpu-mig-allocations value"}},
		{name: "an empty object", args: []string{"validate"}, stdin: `{}`, code: exitInvalid, inStderr: []string{`without "kind"`}},
		{name: "YAML without kind", args: []string{"validate"}, stdin: "metadata:\n  name: x\n", code: exitInvalid, inStderr: []string{`without "kind"`}},
		{name: "a number", args: []string{"validate"}, stdin: `7`, code: exitInvalid, inStderr: []string{"not a Kubernetes object"}},
		{name: "the entry in an array is fine", args: []string{"validate"}, stdin: "[" + one + "]", code: exitOK, inStdout: []string{"valid: 1 entry"}},
	}
	runCases(t, tests)
}

// TestMetricsTwoPodsSameReservation: the deployed scheduler's collector
// fails the whole scrape; ours exports neither pod's series and the rest.
func TestMetricsTwoPodsSameReservation(t *testing.T) {
	realized := realizedEntry(t, `{"containerIndex":0,"deviceIndex":0,"gpuUUID":"`+gpu1+`","profile":"1g.5gb","placement":{"start":0,"size":1},`+
		`"migUUID":"MIG-5e6f7081-92a3-4bcd-8e0f-1a2b3c4d5e6f","gpuInstanceID":7,"computeInstanceID":0}`)
	other := realizedEntry(t, `{"containerIndex":0,"deviceIndex":0,"gpuUUID":"`+gpu0+`","profile":"1g.5gb","placement":{"start":0,"size":1},`+
		`"migUUID":"MIG-6f708192-a3b4-4cde-8f10-2b3c4d5e6f70","gpuInstanceID":9,"computeInstanceID":0}`)
	pods := writeTemp(t, "pods.json", listJSON(t,
		podJSON("a", "mig-node-a", "Running", []reservation.Allocation{realized}, 4864),
		podJSON("b", "mig-node-a", "Running", []reservation.Allocation{realized}, 4864),
		podJSON("c", "mig-node-a", "Running", []reservation.Allocation{other}, 4864)))
	r := migctl(t, "", "metrics", "--node", testdata("node.json"), "--pods", pods)
	r.check(t, exitOK, nil, nil)
	series := parseExposition(t, r.stdout)[reservation.MetricInstanceInfo].GetMetric()
	if got, want := len(series), 1; got != want {
		t.Fatalf("series = %d, want %d (only pod c's)\n%s", got, want, r.stdout)
	}
	for _, l := range series[0].GetLabel() {
		if l.GetName() == "device_uuid" && l.GetValue() != gpu0 {
			t.Errorf("exported %s, want only pod c's GPU %s", l.GetValue(), gpu0)
		}
	}
}

// realizedEntry decodes one allocation entry.
func realizedEntry(t *testing.T, entry string) reservation.Allocation {
	t.Helper()
	allocs, err := reservation.DecodeString("[" + entry + "]")
	if err != nil || len(allocs) != 1 {
		t.Fatalf("entry %s: %v", entry, err)
	}
	return allocs[0]
}

// FuzzStatusRegistration feeds arbitrary registration values to migctl
// status and place: they must never panic, and must answer with one of
// their documented exit codes.
func FuzzStatusRegistration(f *testing.F) {
	value := func(edit func(string) string) string {
		var n corev1.Node
		if err := json.Unmarshal([]byte(readTestdataF(f, "node.json")), &n); err != nil {
			f.Fatal(err)
		}
		return edit(n.Annotations[capability.NodeRegisterAnnotation])
	}
	same := func(v string) string { return v }
	f.Add(value(same))
	f.Add(value(unhealthy(0)))
	f.Add(value(unhealthy(1)))
	f.Add(value(func(v string) string {
		return strings.Replace(v, `"placements":[{"start":0,"size":8}]`, `"placements":null`, 1)
	}))
	f.Add(`[{"id":"GPU-00000000-0000-0000-0000-000000000001","count":10,"devmem":15360,"devcore":100,"type":"Tesla T4","mode":"hami-core"}]`)
	f.Add(`[{"id":"GPU-a"},{"id":"GPU-a","mode":"mig","devcore":100}]`)
	pod := readTestdataF(f, "pod.json")
	path := writeTempF(f, "pod.json", pod)
	f.Fuzz(func(t *testing.T, reg string) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), []string{"status", "--node", "-"}, strings.NewReader(reg), &out, &errOut)
		if code != exitOK && code != exitInvalid {
			t.Fatalf("status: exit code %d for %q\nstderr: %s", code, reg, errOut.String())
		}
		code = run(t.Context(), []string{"place", "--node", "-", "--pod", path}, strings.NewReader(reg), &out, &errOut)
		if code != exitOK && code != exitInvalid && code != exitUnschedulable {
			t.Fatalf("place: exit code %d for %q\nstderr: %s", code, reg, errOut.String())
		}
	})
}

func writeTempF(f *testing.F, name, content string) string {
	f.Helper()
	p := filepath.Join(f.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.Fatal(err)
	}
	return p
}
