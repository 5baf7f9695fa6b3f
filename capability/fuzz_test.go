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
	f.Fuzz(func(t *testing.T, data []byte) {
		devs, err := capability.DecodeNodeRegistration(data)
		// The canonical fast path and the strict decoder agree.
		strict, strictErr := capability.DecodeNodeRegistrationStrict(data)
		if (err == nil) != (strictErr == nil) || !reflect.DeepEqual(devs, strict) {
			t.Fatalf("fast path %#v %v, strict %#v %v", devs, err, strict, strictErr)
		}
		if err != nil {
			if !errors.Is(err, capability.ErrRegistration) {
				t.Fatalf("error %v does not match ErrRegistration", err)
			}
			return
		}
		enc, err := capability.EncodeNodeRegistration(devs)
		if err != nil {
			t.Fatalf("encode of decoded value: %v", err)
		}
		again, err := capability.DecodeNodeRegistration(enc)
		if err != nil {
			t.Fatalf("re-decode: %v\n%s", err, enc)
		}
		if !reflect.DeepEqual(again, devs) {
			t.Fatalf("not a fixed point:\n%#v\n%#v", devs, again)
		}
		enc2, err := capability.EncodeNodeRegistration(again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: %v\n%s\n%s", err, enc, enc2)
		}
		for i := range devs {
			if _, err := devs[i].GPU(); err != nil {
				t.Fatalf("device %d: GPU: %v", i, err)
			}
		}
	})
}
