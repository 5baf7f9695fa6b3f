package capability_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/dynmig/dynmig/capability"
)

// The fuzz targets run their seed corpus under plain `go test`; run one
// longer with, for example:
//
//	go test -run '^$' -fuzz FuzzParseDeviceConfig -fuzztime 30s ./capability

func FuzzParseDeviceConfig(f *testing.F) {
	f.Add([]byte(chartConfig))
	f.Add([]byte(legacyConfig))
	f.Add([]byte(`{"nvidia":{"migProfileAllowlist":[{"models":["A30"],"profiles":["1g.6gb"]}]}}`))
	f.Add([]byte("nvidia:\n  migProfileAllowlist: []\n"))
	f.Add([]byte("nvidia:\n  migProfileAllowlist:\n  - models: [yes, \"\"]\n    profiles: [1g.5gb, 1g.5gb]\n"))
	f.Add([]byte("nvidia: [\n"))
	f.Add([]byte("&a [*a]"))
	f.Add([]byte(""))
	if def, err := capability.EncodeDeviceConfig(capability.DefaultAllowlist(), capability.FormatYAML); err == nil {
		f.Add(def)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := capability.ParseDeviceConfig(data)
		if err != nil {
			if !errors.Is(err, capability.ErrConfig) {
				t.Fatalf("error %v does not match ErrConfig", err)
			}
			return
		}
		if err := cfg.Allowlist.Validate(); err != nil {
			t.Fatalf("accepted an invalid allowlist: %v", err)
		}
		for _, format := range []capability.Format{capability.FormatYAML, capability.FormatJSON} {
			enc, err := capability.EncodeDeviceConfig(cfg.Allowlist, format)
			if err != nil {
				t.Fatalf("%s: encode: %v", format, err)
			}
			again, err := capability.ParseDeviceConfig(enc)
			if err != nil {
				t.Fatalf("%s: re-parse: %v\n%s", format, err, enc)
			}
			if !reflect.DeepEqual(again.Allowlist, cfg.Allowlist) {
				t.Fatalf("%s: not a fixed point:\n%#v\n%#v", format, cfg.Allowlist, again.Allowlist)
			}
		}
	})
}

func FuzzParseLegacyGeometries(f *testing.F) {
	f.Add([]byte(legacyConfig))
	f.Add([]byte(`{"nvidia":{"knownMigGeometries":[{"models":null,"allowedGeometries":[null,[]]}]}}`))
	f.Add([]byte(`{"nvidia":{"knownMigGeometries":[{"models":["A30"],"allowedGeometries":[[{"name":"1g.6gb","core":1,"memory":-2,"count":3}]]}]}}`))
	f.Add([]byte("nvidia:\n  knownMigGeometries: [{models: [A30], allowedGeometries: [[{cores: 1}]]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := capability.ParseLegacyGeometries(data)
		if err != nil {
			if !errors.Is(err, capability.ErrConfig) {
				t.Fatalf("error %v does not match ErrConfig", err)
			}
			return
		}
		doc := map[string]map[string]capability.LegacyGeometries{"nvidia": {"knownMigGeometries": g}}
		enc, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		again, err := capability.ParseLegacyGeometries(enc)
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, enc)
		}
		if !reflect.DeepEqual(again, g) {
			t.Fatalf("not a fixed point:\n%#v\n%#v", g, again)
		}
		a, report := capability.ConvertLegacy(g)
		if err := a.Validate(); err != nil {
			t.Fatalf("conversion produced an invalid allowlist: %v", err)
		}
		if len(report.Entries) != len(g) {
			t.Fatalf("got %d reports for %d entries", len(report.Entries), len(g))
		}
	})
}

func FuzzDecodeNodeRegistration(f *testing.F) {
	f.Add([]byte(specRegistration))
	f.Add([]byte(`[{"id":"GPU-a","count":3,"devmem":40960,"devcore":100,"type":"T","mode":"mig","migProfiles":[` + specProfile + `],"health":true}]`))
	f.Add([]byte(`[{"id":"GPU-a","count":0,"devmem":1,"devcore":100,"type":"<&>","mode":"mig","migProfiles":null,"health":true}]`))
	f.Add([]byte(`[{"id":"GPU-a","index":0,"count":1,"devmem":1,"devcore":0,"type":"T","numa":-1,"mode":"mps","health":false}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"id":"GPU-a","id":"GPU-b"}]`))
	// Every shape the deployed device plugin writes.
	for _, tc := range deployedShapes {
		f.Add([]byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reg, err := capability.ReadNodeRegistration(data)
		// The canonical fast path and the strict reader agree.
		strict, strictErr := capability.ReadNodeRegistrationStrict(data)
		if (err == nil) != (strictErr == nil) || !reflect.DeepEqual(reg, strict) {
			t.Fatalf("fast path %#v %v, strict %#v %v", reg, err, strict, strictErr)
		}
		devs, decodeErr := capability.DecodeNodeRegistration(data)
		if err != nil {
			var re *capability.RegistrationError
			if !errors.As(err, &re) || re.Device != -1 || !errors.Is(err, capability.ErrRegistration) {
				t.Fatalf("array error %v is not a RegistrationError for the array", err)
			}
			if !reflect.DeepEqual(reg, capability.NodeRegistration{}) || decodeErr == nil {
				t.Fatalf("unusable value read as %#v; Decode %v", reg, decodeErr)
			}
			return
		}
		for _, re := range reg.Rejected {
			if re.Device < 0 || !errors.Is(re, capability.ErrRegistration) {
				t.Fatalf("rejection %v names no device", re)
			}
		}
		// Decode is all or nothing over the same reading.
		if (decodeErr == nil) != (len(reg.Rejected) == 0) || (decodeErr == nil && !reflect.DeepEqual(devs, reg.Devices)) {
			t.Fatalf("Decode %#v %v, Read %#v", devs, decodeErr, reg)
		}
		enc, err := capability.EncodeNodeRegistration(reg.Devices)
		if err != nil {
			t.Fatalf("encode of the usable devices: %v", err)
		}
		again, err := capability.ReadNodeRegistration(enc)
		if err != nil || len(again.Rejected) > 0 {
			t.Fatalf("re-read: %v %v\n%s", err, again.Err(), enc)
		}
		if !reflect.DeepEqual(again.Devices, reg.Devices) || len(again.Findings) != len(reg.Findings) {
			t.Fatalf("not a fixed point:\n%#v\n%#v", reg, again)
		}
		enc2, err := capability.EncodeNodeRegistration(again.Devices)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: %v\n%s\n%s", err, enc, enc2)
		}
		mig := 0
		for i := range reg.Devices {
			g, err := reg.Devices[i].GPU()
			if err != nil {
				t.Fatalf("device %d: GPU: %v", i, err)
			}
			if g.Unhealthy == reg.Devices[i].Health {
				t.Fatalf("device %d: health %v read as Unhealthy %v", i, reg.Devices[i].Health, g.Unhealthy)
			}
			if reg.Devices[i].Mode == capability.ModeMIG {
				mig++
			}
		}
		if got := len(reg.GPUs()); got != mig {
			t.Fatalf("GPUs: %d, want the %d MIG devices", got, mig)
		}
	})
}
