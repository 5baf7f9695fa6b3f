package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/fakehal"
)

func discoverCommand() command {
	return command{
		name:    "discover",
		args:    "--fake MODEL[,MODEL...] [--driver current|early] [--allowlist FILE] [--node NAME] [--seed N] | --nvml",
		summary: "node registration a fake node of the given GPU models would publish",
		help: `Builds an in-memory node of the given GPU models (fakehal presets; "8xA100"
repeats a model), discovers its MIG capability under the allowlist (the
built-in one, or nvidia.migProfileAllowlist from a scheduler device config),
and prints the hami.io/node-nvidia-register value the device plugin would
publish, byte for byte. With --node it prints a Kubernetes Node carrying the
annotation instead, ready for place, status and metrics.

--driver early builds the tables the first drivers for a model reported
where they differ (B200's 1g memory, GB200's profile names). A preset not
confirmed on hardware gets a "note:" line on standard error saying what is
estimated.

--nvml instead reads this node's GPUs through NVML, read-only (it never
changes the MIG mode and creates nothing), and compares each with the
fakehal preset for its NVML name: total memory, and per profile the name,
ID, memory, SMs, slices, instance count, placements, media engines and,
for profiles with a live instance, the spanning compute instance profile.
It prints the table of differences; exit 1 when a GPU differs or has no
preset. It needs a build with cgo and the NVIDIA driver.

Discovery findings (profiles or GPUs left out) go to standard error; exit 1
when a GPU publishes nothing (no allowlist match, MIG disabled, no profile
resolved, unusable profile), 0 when only allowlisted aliases did not resolve.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			fake := fs.String("fake", "", "comma-separated GPU models, each optionally prefixed by a count (\"8xA100-SXM4-40GB\")")
			allow := fs.String("allowlist", "", "scheduler device config (YAML or JSON) with nvidia.migProfileAllowlist; default: the built-in allowlist")
			node := fs.String("node", "", "print a Kubernetes Node of this name carrying the registration")
			seed := fs.Uint64("seed", 1, "seed of the fake GPU UUIDs")
			driver := fs.String("driver", "current", "driver generation of the fake tables: current or early")
			nvmlCheck := fs.Bool("nvml", false, "compare this node's GPUs, read through NVML, with their fakehal presets (read-only)")
			return func(e *env, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if *nvmlCheck {
					if *fake != "" {
						return usageErr("--nvml and --fake exclude each other")
					}
					return discoverNVML(e)
				}
				drv, err := parseDriver(*driver)
				if err != nil {
					return err
				}
				return discover(e, *fake, *allow, *node, *seed, drv)
			}
		},
	}
}

func discover(e *env, fake, allowFile, nodeName string, seed uint64, drv fakehal.Driver) error {
	models, err := parseModels(fake)
	if err != nil {
		return err
	}
	policy, err := loadAllowlist(e, allowFile)
	if err != nil {
		return err
	}
	hw, err := fakehal.New(fakehal.Options{GPUs: models, Seed: seed, Driver: drv})
	if err != nil {
		return usageErr("--fake: %v (models: %s)", err, knownModels())
	}
	noteUnconfirmed(e, models)
	gpus, report, err := capability.Discover(e.ctx, hw, policy)
	if err != nil {
		return err
	}
	devs := make([]capability.NodeDevice, 0, len(gpus))
	for _, g := range gpus {
		d, err := capability.NewMIGNodeDevice(g, true)
		if err != nil {
			return fmt.Errorf("GPU %d: %w", g.Index, err)
		}
		devs = append(devs, d)
	}
	value, err := capability.EncodeNodeRegistration(devs)
	if err != nil {
		return err
	}
	if nodeName == "" {
		fmt.Fprintf(e.stdout, "%s\n", value)
	} else if err := writeNode(e, nodeName, string(value)); err != nil {
		return err
	}
	serious := false
	for _, f := range report.Findings {
		if f.Kind == capability.FindingResolved && allowFile == "" {
			// The built-in allowlist keeps the HAMi chart's names (7g.79gb)
			// next to the drivers' on purpose: nothing to report.
			continue
		}
		fmt.Fprintf(e.stderr, "finding: %s\n", findingSentence(f))
		if f.Kind != capability.FindingUnresolved && f.Kind != capability.FindingModePending && f.Kind != capability.FindingResolved {
			serious = true
		}
	}
	if serious {
		return errFindings
	}
	return nil
}

// writeNode prints a Node object carrying the registration annotation.
func writeNode(e *env, name, value string) error {
	n := corev1.Node{
		TypeMeta:   metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{capability.NodeRegisterAnnotation: value}},
	}
	out, err := json.MarshalIndent(&n, "", "    ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", out)
	return err
}

// parseModels reads "MODEL[,MODEL...]" where a model may be prefixed by a
// count, "8xA100".
func parseModels(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usageErr("--fake is required (models: %s)", knownModels())
	}
	var out []string
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		n := 1
		if i := strings.IndexAny(item, "xX"); i > 0 {
			if c, err := strconv.Atoi(item[:i]); err == nil {
				if c < 1 || c > 64 {
					return nil, usageErr("--fake %q: count %d out of 1..64", item, c)
				}
				n, item = c, item[i+1:]
			}
		}
		if item == "" {
			return nil, usageErr("--fake %q: empty model", s)
		}
		if _, ok := fakehal.LookupModel(item); !ok {
			return nil, usageErr("--fake: unknown model %q (models: %s)", item, knownModels())
		}
		out = append(out, fakehal.Repeat(n, item)...)
	}
	if len(out) > 64 {
		return nil, usageErr("--fake: %d GPUs, at most 64", len(out))
	}
	return out, nil
}

func knownModels() string {
	var names []string
	for _, m := range fakehal.Models() {
		names = append(names, strconv.Quote(m.Name))
	}
	return strings.Join(names, ", ")
}

// loadAllowlist reads nvidia.migProfileAllowlist from a device config file,
// or returns the built-in allowlist for "".
func loadAllowlist(e *env, file string) (capability.Allowlist, error) {
	if file == "" {
		return capability.DefaultAllowlist(), nil
	}
	data, err := e.readInput(file)
	if err != nil {
		return nil, err
	}
	cfg, err := capability.ParseDeviceConfig(data)
	if errors.Is(err, capability.ErrLegacyConfig) {
		return nil, fmt.Errorf("%s: %w (convert it: migctl convert-legacy %s)", displayName(file), err, file)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", displayName(file), err)
	}
	if cfg.Allowlist == nil {
		return nil, fmt.Errorf("%s: no nvidia.migProfileAllowlist", displayName(file))
	}
	if cfg.LegacyIgnored {
		fmt.Fprintf(e.stderr, "migctl: %s: nvidia.knownMigGeometries is ignored next to migProfileAllowlist\n", displayName(file))
	}
	printResolutions(e, displayName(file), cfg.Allowlist)
	return cfg.Allowlist, nil
}

// findingSentence says what a discovery finding means for the node, in a
// sentence for the operator (capability.Finding.String is for logs).
func findingSentence(f capability.Finding) string {
	gpu := fmt.Sprintf("GPU %d (%q, %s)", f.GPU, f.Model, f.UUID)
	entry := fmt.Sprintf("migProfileAllowlist[%d]", f.Entry)
	switch f.Kind {
	case capability.FindingNoMatch:
		return gpu + " matches no migProfileAllowlist entry, so it publishes no MIG profiles."
	case capability.FindingMIGDisabled:
		return fmt.Sprintf("%s has MIG mode off, so it publishes no MIG profiles; turn it on with nvidia-smi -i %d -mig 1, or the device plugin's -enable-mig.", gpu, f.GPU)
	case capability.FindingModePending:
		return gpu + " has a MIG mode change waiting for a GPU reset; until the reset it is used in its current mode."
	case capability.FindingUnresolved:
		return fmt.Sprintf("%s has no profile %s, which %s names, so that profile is left out.", gpu, f.Profile, entry)
	case capability.FindingNoProfiles:
		return fmt.Sprintf("%s has none of the profiles %s names, so it publishes no MIG profiles.", gpu, entry)
	case capability.FindingResolved:
		return fmt.Sprintf("%s knows the profile %s (named in %s) as %s, and publishes it under that name.", gpu, f.Profile, entry, f.Resolved)
	case capability.FindingBadProfile:
		s := gpu + " reports a profile that cannot be used"
		if f.Profile != "" {
			s = fmt.Sprintf("%s reports a profile %s that cannot be used", gpu, f.Profile)
		}
		if f.Err != nil {
			return fmt.Sprintf("%s, so it is left out: %v.", s, f.Err)
		}
		return s + ", so it is left out."
	}
	return f.String()
}
