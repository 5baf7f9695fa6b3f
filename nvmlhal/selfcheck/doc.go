// Package selfcheck says whether the fake hardware is faithful to a real
// GPU: it reads each GPU through NVML without changing anything
// ([nvmlhal.Backend.Inspect]) and compares what the driver reports with
// the fakehal preset for the GPU's NVML name ([fakehal.LookupModel]):
// total memory, and per GPU instance profile (by NVML profile index) the
// name, profile ID, memory, SM count, compute slices, instance count,
// possible placements, media engines and, for profiles with a live GPU
// instance, the compute instance profile that spans it.
//
// It never changes the MIG mode and never creates or destroys an
// instance, so it can run on a production node: compute instance profiles
// are readable only on an existing GPU instance, so those of profiles
// without one are reported as not checked rather than created, and the
// compute instance profile such a GPU instance would get (the one spanning
// it) is printed as "implied, not measured". Where driver generations
// report different tables ([fakehal.Model.Older]) the GPU is compared with
// the closest one, and the result names it.
//
// Each difference is classified ([Class]): a value another driver
// generation of the preset reports (named), drift within 2% (memory, or a
// name 1 GB off, as drivers drift between releases), or a real mismatch.
//
// Units: memory in MiB as NVML reports it; placements are half-open slot
// intervals [Start, Start+Size). A [Result] is a plain value; [Check] and
// [Write] are safe for concurrent use when the [Inspector] is.
//
// The hardware test of package nvmlhal (go test -tags nvml_hardware -run
// TestHardwareSelfCheck ./nvmlhal/) and `migctl discover --nvml` print
// [Write]'s table.
package selfcheck
