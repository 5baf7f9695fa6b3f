package capability_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dynmig/dynmig/capability"
)

func ExampleParseProfileName() {
	for _, s := range []string{"2g.10gb", "1g.24gb+me.all", "4g"} {
		n, err := capability.ParseProfileName(s)
		if err != nil {
			fmt.Println(errors.Is(err, capability.ErrProfileName))
			continue
		}
		fmt.Println(n.Compute, n.MemoryGB, n.Variant, n.Prefix())
	}
	// Output:
	// 2 10 plain 2g
	// 1 24 +me.all 1g
	// true
}

func ExampleDeriveProfileName() {
	// A driver without V3 profile names: the A100-80GB's full profile.
	n := capability.DeriveProfileName(capability.GIProfile7Slice, 7, 80896, 81920)
	fmt.Println(n)
	// Output: 7g.80gb
}

func ExampleCore() {
	// 2g.10gb on an A100-40GB: 28 SMs of the 98 the 7g profile has.
	fmt.Println(capability.Core(28, 98))
	// Output: 29
}

func ExamplePlacement() {
	a, b, c := capability.Placement{Start: 0, Size: 2}, capability.Placement{Start: 2, Size: 2}, capability.Placement{Start: 0, Size: 8}
	fmt.Println(a, b, a.Overlaps(b), c.Overlaps(b), c.Covers(b))
	fmt.Printf("%08b\n", b.Mask())
	// Output:
	// [0,2) [2,4) false true true
	// 00001100
}

func ExampleAllowlist_Match() {
	policy := capability.DefaultAllowlist()
	for _, name := range []string{"NVIDIA H200 NVL", "NVIDIA H20", "NVIDIA GB200", "NVIDIA H100 80GB HBM3", "Tesla T4"} {
		i, model, ok := policy.Match(name)
		if !ok {
			fmt.Printf("%s: no entry\n", name)
			continue
		}
		fmt.Printf("%s: entry %d via %q, %v\n", name, i, model, policy[i].Profiles)
	}
	// Output:
	// NVIDIA H200 NVL: entry 3 via "NVIDIA H200", [1g.18gb 2g.35gb 3g.71gb 7g.141gb]
	// NVIDIA H20: entry 4 via "NVIDIA H20", [1g.12gb 2g.24gb 3g.48gb 7g.96gb]
	// NVIDIA GB200: entry 2 via "NVIDIA GB200", [1g.23gb 1g.24gb 2g.47gb 3g.93gb 3g.95gb 7g.186gb 7g.189gb]
	// NVIDIA H100 80GB HBM3: entry 7 via "NVIDIA H100 80GB HBM3", [1g.10gb 2g.20gb 3g.40gb 7g.80gb]
	// Tesla T4: no entry
}

func ExampleParseDeviceConfig() {
	cfg, err := capability.ParseDeviceConfig([]byte(`
nvidia:
  resourceCountName: nvidia.com/gpu
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
    - models: ["A30"]
      profiles: ["1g.6gb", "2g.12gb", "2g.12gb"]
`))
	var ce *capability.ConfigError
	if errors.As(err, &ce) {
		fmt.Println(ce.Path, ce.Entry, ce.Field)
	}

	cfg, err = capability.ParseDeviceConfig([]byte(`
nvidia:
  migProfileAllowlist:
    - models: ["A100-SXM4-40GB"]
      profiles: ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]
`))
	fmt.Println(cfg.Allowlist.Profiles("NVIDIA A100-SXM4-40GB"), err)

	_, err = capability.ParseDeviceConfig([]byte("nvidia:\n  knownMigGeometries: []\n"))
	fmt.Println(errors.Is(err, capability.ErrLegacyConfig))
	// Output:
	// nvidia.migProfileAllowlist[1].profiles[2] 1 profiles[2]
	// [1g.5gb 2g.10gb 3g.20gb 7g.40gb] <nil>
	// true
}

func ExampleEncodeDeviceConfig() {
	data, err := capability.EncodeDeviceConfig(capability.DefaultAllowlist()[10:], capability.FormatYAML)
	if err != nil {
		panic(err)
	}
	fmt.Print(string(data))
	// Output:
	// nvidia:
	//   migProfileAllowlist:
	//   - models:
	//     - NVIDIA A30
	//     - A30
	//     profiles:
	//     - 1g.6gb
	//     - 2g.12gb
	//     - 4g.24gb
	//   - models:
	//     - NVIDIA RTX PRO 6000 Blackwell Server Edition
	//     - NVIDIA RTX PRO 6000 Blackwell Workstation Edition
	//     - NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition
	//     - RTX PRO 6000 Blackwell Server Edition
	//     profiles:
	//     - 1g.24gb
	//     - 2g.48gb
	//     - 4g.96gb
}

func ExampleConvertLegacy() {
	legacy, err := capability.ParseLegacyGeometries([]byte(`
nvidia:
  knownMigGeometries:
  - models: ["A30"]
    allowedGeometries:
      - - {name: 1g.6gb, memory: 6144, count: 4}
      - - {name: 2g.12gb, memory: 12288, count: 1}
        - {name: 1g.6gb, memory: 6144, count: 2}
      - - {name: 4g.24gb-old, memory: 24576, count: 1}
`))
	if err != nil {
		panic(err)
	}
	allow, report := capability.ConvertLegacy(legacy)
	fmt.Println(allow)
	for _, e := range report.Entries {
		fmt.Println(e.Entry, e.Profiles, "invalid:", e.InvalidProfiles)
	}
	// Output:
	// [{[A30] [1g.6gb 2g.12gb]}]
	// 0 [1g.6gb 2g.12gb] invalid: [4g.24gb-old]
}

// a30View is a one-GPU HardwareView for the examples.
type a30View struct{}

func (a30View) Devices(context.Context) ([]capability.DeviceInfo, error) {
	return []capability.DeviceInfo{{Index: 0, UUID: "GPU-a30", Name: "NVIDIA A30", MemoryMB: 24576,
		MIGMode: capability.MIGEnabled, PendingMIGMode: capability.MIGEnabled}}, nil
}

func (a30View) GIProfiles(context.Context, int) ([]capability.GIProfileInfo, error) {
	return a30, nil // the facts-file table, +me variants included
}

func ExampleDiscover() {
	policy := capability.Allowlist{{Models: []string{"A30"}, Profiles: []string{"4g.24gb", "1g.6gb", "2g.12gb+me", "1g.12gb"}}}
	gpus, report, err := capability.Discover(context.Background(), a30View{}, policy)
	if err != nil {
		panic(err)
	}
	for _, p := range gpus[0].Profiles {
		fmt.Println(p.Name, p.MemoryMB, p.Core, p.Placements)
	}
	fmt.Println("width", gpus[0].Width())
	for _, f := range report.Findings {
		fmt.Println(f)
	}
	// Output:
	// 1g.6gb 5952 25 [[0,1) [1,2) [2,3) [3,4)]
	// 2g.12gb+me 11968 50 [[0,2) [2,4)]
	// 4g.24gb 24000 100 [[0,4)]
	// width 4
	// GPU 0 (GPU-a30, "NVIDIA A30"): unresolved entry 0 profile 1g.12gb
}

func ExampleDecodeNodeRegistration() {
	annotation := `[{"id":"GPU-a","count":3,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig",` +
		`"migProfiles":[{"name":"2g.10gb","memoryMB":9984,"core":29,"sliceCount":2,"placements":[{"start":0,"size":2},{"start":2,"size":2},{"start":4,"size":2}]}],"health":true}]`
	devs, err := capability.DecodeNodeRegistration([]byte(annotation))
	if err != nil {
		panic(err)
	}
	gpu, err := devs[0].GPU()
	if err != nil {
		panic(err)
	}
	p := gpu.Profile("2g.10gb")
	fmt.Println(gpu.UUID, gpu.MIGMode, gpu.Width(), p.Core, p.Placements)
	again, _ := capability.EncodeNodeRegistration(devs)
	fmt.Println(string(again) == annotation)

	_, err = capability.DecodeNodeRegistration([]byte(`[{"id":"GPU-a","count":1,"devmem":1,"devcore":100,"type":"T","mode":"mig","health":true,` +
		`"migProfiles":[{"name":"1g.5gb","memoryMB":1,"core":1,"sliceCount":1,"placements":[{"start":0,"size":0}]}]}]`))
	var re *capability.RegistrationError
	if errors.As(err, &re) {
		fmt.Println(re.Device, re.Field)
	}
	// Output:
	// GPU-a enabled 6 29 [[0,2) [2,4) [4,6)]
	// true
	// 0 migProfiles[0].placements[0].size
}

func ExampleNewMIGNodeDevice() {
	gpus, _, err := capability.Discover(context.Background(), a30View{}, capability.DefaultAllowlist())
	if err != nil {
		panic(err)
	}
	dev, err := capability.NewMIGNodeDevice(gpus[0], true)
	if err != nil {
		panic(err)
	}
	data, _ := capability.EncodeNodeRegistration([]capability.NodeDevice{dev})
	fmt.Println(string(data))
	// Output:
	// [{"id":"GPU-a30","count":4,"devmem":24576,"devcore":100,"type":"NVIDIA A30","mode":"mig","migProfiles":[{"name":"1g.6gb","memoryMB":5952,"core":25,"sliceCount":1,"placements":[{"start":0,"size":1},{"start":1,"size":1},{"start":2,"size":1},{"start":3,"size":1}]},{"name":"2g.12gb","memoryMB":11968,"core":50,"sliceCount":2,"placements":[{"start":0,"size":2},{"start":2,"size":2}]},{"name":"4g.24gb","memoryMB":24000,"core":100,"sliceCount":4,"placements":[{"start":0,"size":4}]}],"health":true}]
}
