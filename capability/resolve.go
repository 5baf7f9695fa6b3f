package capability

// Denotes reports whether the profile name n denotes profile p of a GPU
// whose total memory is totalMiB under some driver's or chart's naming:
// the same compute slices, the same variant, and a memory figure in the
// same eighth of the GPU's memory as p's (both rounded to the nearest
// eighth, the unit NVIDIA's naming rule rounds to). Names drift between
// drivers and tools by less than that (7g.79gb and 7g.80gb for A100-80GB's
// 80896 MiB; GB200's 1g.24gb and 1g.23gb), while two profiles of one GPU
// with the same slices and variant differ by at least an eighth (1g.10gb
// and 1g.20gb on A100-80GB). It is false when totalMiB is 0.
func Denotes(n ProfileName, p *Profile, totalMiB uint64) bool {
	if totalMiB == 0 || !n.IsValid() || n.Compute != p.SliceCount || n.Variant != p.Variant {
		return false
	}
	return eighth(uint64(n.MemoryGB)*1024, totalMiB) == eighth(p.MemoryMB, totalMiB)
}

// eighth rounds mib/total*8 to the nearest integer, halves up.
func eighth(mib, total uint64) uint64 { return (mib*16 + total) / (2 * total) }

// ResolveProfileName returns the profile of ps, a GPU's table, that name
// denotes: the profile named name, or else the only one of ps that name
// [Denotes] on a GPU with totalMiB of memory. exact reports the first case.
// ok is false when name is malformed, or when no profile or more than one
// matches.
func ResolveProfileName(name string, ps []Profile, totalMiB uint64) (p *Profile, exact, ok bool) {
	for i := range ps {
		if ps[i].Name == name {
			return &ps[i], true, true
		}
	}
	n, err := ParseProfileName(name)
	if err != nil {
		return nil, false, false
	}
	for i := range ps {
		if Denotes(n, &ps[i], totalMiB) {
			if p != nil {
				return nil, false, false // ambiguous
			}
			p = &ps[i]
		}
	}
	return p, false, p != nil
}

// Resolution is one allowlisted name that a model's table does not have
// but resolves to one of its profiles ([ResolveProfileName]).
type Resolution struct {
	Entry    int    // the allowlist entry
	Model    string // the table's model (NVML device name)
	Name     string // the allowlisted name
	Resolved string // the table's name for the same profile
}

// ResolveAllowlist lists, for each table whose model matches an entry of
// a, the entry's names the table lacks but resolves, in table then entry
// order: what [Discover] would publish under the driver's name on a GPU
// reporting the table. Tables whose profiles cannot be built are skipped.
func ResolveAllowlist(a Allowlist, tables []ModelTable) []Resolution {
	var out []Resolution
	for _, t := range tables {
		entry, _, ok := a.Match(t.Name)
		if !ok {
			continue
		}
		gpu, _ := GPUFromDevice(DeviceInfo{Name: t.Name, MemoryMB: t.MemoryMB, MIGMode: MIGEnabled}, t.Profiles)
		for _, name := range a[entry].Profiles {
			if p, exact, ok := ResolveProfileName(name, gpu.Profiles, t.MemoryMB); ok && !exact {
				out = append(out, Resolution{Entry: entry, Model: t.Name, Name: name, Resolved: p.Name})
			}
		}
	}
	return out
}
