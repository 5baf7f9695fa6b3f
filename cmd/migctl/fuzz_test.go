package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// FuzzValidate feeds arbitrary input to migctl validate: it must never
// panic, and must answer valid (0) or invalid (1), never anything else.
func FuzzValidate(f *testing.F) {
	for _, name := range []string{"spec-allocation.json", "design-example.json", "invalid-allocations.json", "pods.json", "pod.json", "pods-bad.json"} {
		f.Add(readTestdataF(f, name))
	}
	f.Add(`"[]"`)
	f.Add(`{"kind":"List","items":[{"kind":"Pod"},{"kind":"Node"}]}`)
	f.Add("kind: PodList\nitems:\n- metadata: {name: a}\n")
	f.Fuzz(func(t *testing.T, in string) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), []string{"validate"}, strings.NewReader(in), &out, &errOut)
		if code != exitOK && code != exitInvalid {
			t.Fatalf("exit code %d for %q\nstderr: %s", code, in, errOut.String())
		}
	})
}

// FuzzObjects feeds arbitrary Kubernetes JSON to the object decoders.
func FuzzObjects(f *testing.F) {
	for _, name := range []string{"node.json", "pods.json", "podlist.json", "pod.json"} {
		f.Add(readTestdataF(f, name))
	}
	f.Fuzz(func(t *testing.T, in string) {
		pods, err := decodePods([]byte(in))
		if err == nil {
			for _, p := range pods {
				_ = podView(p)
			}
		}
		_, _ = decodeNodes([]byte(in))
	})
}

func readTestdataF(f *testing.F, name string) string {
	f.Helper()
	b, err := os.ReadFile(testdata(name))
	if err != nil {
		f.Fatal(err)
	}
	return string(b)
}
