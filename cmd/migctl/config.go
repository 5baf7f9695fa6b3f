package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/dynmig/dynmig/capability"
)

func defaultsCommand() command {
	return command{
		name:    "defaults",
		args:    "[--json]",
		summary: "the built-in migProfileAllowlist",
		help: `Prints the built-in policy as a scheduler device config document,
{nvidia: {migProfileAllowlist: [...]}}: the HAMi chart's default models under
the names NVML really reports, with the chart's strings kept as aliases.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			asJSON := fs.Bool("json", false, "print JSON instead of YAML")
			return func(e *env, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				out, err := capability.EncodeDeviceConfig(capability.DefaultAllowlist(), format(*asJSON))
				if err != nil {
					return err
				}
				return writeDoc(e, out)
			}
		},
	}
}

func format(asJSON bool) capability.Format {
	if asJSON {
		return capability.FormatJSON
	}
	return capability.FormatYAML
}

func writeDoc(e *env, out []byte) error {
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	_, err := e.stdout.Write(out)
	return err
}

func convertLegacyCommand() command {
	return command{
		name:    "convert-legacy",
		args:    "[--json] FILE",
		summary: "convert a v2.9 knownMigGeometries device config to migProfileAllowlist",
		help: `Reads a scheduler device config (YAML or JSON, "-" for standard input) that
carries the v2.9 nvidia.knownMigGeometries and prints the equivalent
nvidia.migProfileAllowlist: per legacy entry, the same models and the union of
the profile names of its geometries. Instance counts, memory and core are
dropped on purpose: NVML placements, not geometries, define capacity now.

What could not be converted (names that are not profile names, empty or
duplicate models, entries left empty) is listed on standard error and makes
the exit code 1; the converted document is printed either way. Names that a
built-in model's driver reports differently but that denote one of its
profiles (7g.79gb for A100 80GB's 7g.80gb) are listed on standard error too:
discovery publishes them under the driver's name.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			asJSON := fs.Bool("json", false, "print JSON instead of YAML")
			return func(e *env, args []string) error {
				if len(args) != 1 {
					return usageErr("want exactly one FILE (\"-\" for standard input)")
				}
				return convertLegacy(e, args[0], format(*asJSON))
			}
		},
	}
}

func convertLegacy(e *env, file string, f capability.Format) error {
	data, err := e.readInput(file)
	if err != nil {
		return err
	}
	legacy, err := capability.ParseLegacyGeometries(data)
	if err != nil {
		return fmt.Errorf("%s: %w", displayName(file), err)
	}
	allow, report := capability.ConvertLegacy(legacy)
	out, err := capability.EncodeDeviceConfig(allow, f)
	if err != nil {
		return err
	}
	if err := writeDoc(e, out); err != nil {
		return err
	}
	printResolutions(e, displayName(file), allow)
	if report.Clean() {
		return nil
	}
	for _, r := range report.Entries {
		prefix := fmt.Sprintf("knownMigGeometries[%d]", r.Entry)
		if len(r.InvalidProfiles) > 0 {
			fmt.Fprintf(e.stderr, "%s: left out names that are not profile names: %s\n", prefix, strings.Join(r.InvalidProfiles, ", "))
		}
		if len(r.InvalidModels) > 0 {
			fmt.Fprintf(e.stderr, "%s: left out empty or duplicate models: %q\n", prefix, r.InvalidModels)
		}
		if r.Dropped != "" {
			fmt.Fprintf(e.stderr, "%s: dropped: %s\n", prefix, r.Dropped)
		}
	}
	return errFindings
}
