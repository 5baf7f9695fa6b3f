package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/reservation"
)

func validateCommand() command {
	return command{
		name:    "validate",
		args:    "[--node NODE.json] [FILE]",
		summary: "check a hami.io/vgpu-mig-allocations value, Pod or PodList",
		help: `Checks allocation records the way the deployed scheduler and device plugin
read them. FILE (default: standard input) holds either an annotation value
(the JSON array itself, or that array as a quoted JSON string) or Kubernetes
JSON/YAML: a Pod, a PodList or a List. For pods every record is decoded
strictly and validated, legacy v2.9 template/slot identifiers in
hami.io/vgpu-devices-allocated are refused, and active pods are checked
against each other (overlapping placements, shared MIG UUIDs or GPU instance
IDs, missing or repeated pod UIDs).

With --node, entries are also checked against the node's registration: the
GPU exists, publishes the profile and published the placement.

Exit 0 when everything is valid; exit 1 with every problem listed by pod,
entry and field.`,
		setup: func(fs *flag.FlagSet) func(*env, []string) error {
			node := fs.String("node", "", "Node JSON (or a bare registration value) to check entries against")
			nodeName := fs.String("node-name", "", "the node to use when NODE.json holds several")
			return func(e *env, args []string) error {
				file, err := oneFile(args)
				if err != nil {
					return err
				}
				return validate(e, file, *node, *nodeName)
			}
		},
	}
}

func validate(e *env, file, nodeFile, nodeName string) error {
	var lookup reservation.GPULookup
	var node string
	if nodeFile != "" {
		if nodeFile == "-" && file == "-" {
			return usageErr("--node and FILE cannot both read standard input")
		}
		nv, err := loadNode(e, nodeFile, nodeName, "")
		if err != nil {
			return err
		}
		nv.warnRegistration(e)
		lookup, node = reservation.GPUs(nv.gpus), nv.name
	}
	data, err := e.readInput(file)
	if err != nil {
		return err
	}
	t := bytes.TrimSpace(data)
	var problems []string
	switch {
	case len(t) == 0:
		return fmt.Errorf("%s is empty: nothing to validate (did the command that feeds it fail?)", displayName(file))
	case t[0] == '"':
		var value string
		if err := json.Unmarshal(t, &value); err != nil {
			return fmt.Errorf("%s: quoted annotation value: %w", displayName(file), err)
		}
		problems = validateValue(e, value, lookup, "", false, nil)
	case t[0] == '[':
		problems = validateValue(e, string(t), lookup, "", false, nil)
	default:
		pods, err := decodePods(data)
		if err != nil {
			return fmt.Errorf("%s: %w (want a %s value, a JSON array of entries or that array as a quoted string, or a Pod, PodList or List)",
				displayName(file), err, reservation.AnnotationKey)
		}
		problems = validatePods(e, pods, lookup, node)
	}
	for _, p := range problems {
		fmt.Fprintln(e.stdout, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(e.stdout, "invalid: %s\n", plural(len(problems), "problem", "problems"))
		return errFindings
	}
	return nil
}

// validateValue checks one annotation value; valid values print a summary
// line (prefixed by the pod, when there is one) and return no problems.
// requests, for a pod's record, are its containers' device requests: the
// trust rule then reports each entry its container does not request as
// occupying nothing, as the scheduler and device plugin treat it
// (kube.TrustedEntries). A bare value (requests nil, pod false) has no
// containers to check.
func validateValue(e *env, value string, lookup reservation.GPULookup, prefix string, pod bool, requests []int) []string {
	allocs, err := reservation.DecodeString(value)
	if err != nil {
		return describe(prefix, err)
	}
	if lookup != nil {
		err = reservation.ValidateAgainst(allocs, lookup)
	} else {
		err = reservation.Validate(allocs)
	}
	if err != nil {
		return describe(prefix, err)
	}
	if pod {
		if _, untrusted := kube.TrustedEntries(allocs, requests); untrusted != nil {
			return describe(prefix, untrusted)
		}
	}
	realized := 0
	for _, a := range allocs {
		if _, ok := a.Runtime(); ok {
			realized++
		}
	}
	fmt.Fprintf(e.stdout, "%svalid: %s, %d realized, %d not yet realized\n", prefix, plural(len(allocs), "entry", "entries"), realized, len(allocs)-realized)
	return nil
}

// validatePods checks pods; with a node's lookup, a pod bound to another
// node is checked on its own, not against the node.
func validatePods(e *env, pods []*corev1.Pod, lookup reservation.GPULookup, node string) []string {
	var problems []string
	snap := reservation.Snapshot{Complete: true}
	for _, p := range pods {
		v := podView(p)
		snap.Pods = append(snap.Pods, v)
		prefix := "pod " + podKey(v) + ": "
		if legacy, ok := v.Annotations[reservation.LegacyDevicesAnnotationKey]; ok {
			if _, err := reservation.ParseLegacyDevices(legacy); err != nil {
				problems = append(problems, describe(prefix, err)...)
			}
		}
		value, ok := v.Annotations[reservation.AnnotationKey]
		if !ok {
			fmt.Fprintf(e.stdout, "%sno %s annotation\n", prefix, reservation.AnnotationKey)
			continue
		}
		if !v.Active() {
			prefix = fmt.Sprintf("pod %s (%s, no longer counted): ", podKey(v), phaseOf(v))
		}
		podLookup := lookup
		if lookup != nil && p.Spec.NodeName != "" && p.Spec.NodeName != node {
			fmt.Fprintf(e.stdout, "%sbound to node %s, not checked against node %s\n", prefix, p.Spec.NodeName, node)
			podLookup = nil
		}
		problems = append(problems, validateValue(e, value, podLookup, prefix, true, v.DeviceRequests)...)
	}
	// Cross-pod rules: only the desired set of the active pods knows them.
	for _, r := range reservation.Desired(snap).Reasons {
		var ce *reservation.ConflictError
		var pe *reservation.PodError
		switch {
		case errors.As(r, &ce):
			problems = append(problems, fmt.Sprintf("pods %s and %s: entry %d and entry %d: %s",
				podName(ce.First), podName(ce.Second), ce.First.Index, ce.Second.Index, conflictDetail(ce)))
		case errors.As(r, &pe) && errors.Is(pe.Err, reservation.ErrPodIdentity):
			problems = append(problems, fmt.Sprintf("pod %s: %s", pe.Pod, problemLabel(pe.Err)))
		}
	}
	return problems
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func phaseOf(v reservation.Pod) string {
	if v.Deleting {
		return "deleting"
	}
	return string(v.Phase)
}

func podName(e reservation.Entry) string {
	if e.Namespace == "" {
		return e.Name
	}
	return e.Namespace + "/" + e.Name
}

func conflictDetail(ce *reservation.ConflictError) string {
	if ce.Detail != "" {
		return problemLabel(ce.Problem) + ": " + ce.Detail
	}
	return problemLabel(ce.Problem)
}

// problemLabels name reservation's problem sentinels in migctl's output,
// so that the output does not change when an error message is reworded.
var problemLabels = []struct {
	err   error
	label string
}{
	{reservation.ErrNegativeIndex, "negative index"},
	{reservation.ErrGPUUUID, "malformed GPU UUID"},
	{reservation.ErrProfile, "malformed profile name"},
	{reservation.ErrPlacement, "invalid placement"},
	{reservation.ErrDuplicateEntry, "duplicate (containerIndex, deviceIndex)"},
	{reservation.ErrPartialRuntime, "partial runtime identity"},
	{reservation.ErrMIGUUID, "malformed MIG UUID"},
	{reservation.ErrOverlap, "overlapping placements"},
	{reservation.ErrRuntimeConflict, "same MIG UUID or GPU instance"},
	{reservation.ErrUnknownGPU, "GPU not on the node"},
	{reservation.ErrUnknownProfile, "profile not published by the GPU"},
	{reservation.ErrUnpublishedPlacement, "placement not published for the profile"},
	{reservation.ErrPodIdentity, "pod UID missing or shared with another pod"},
	{reservation.ErrNotRequested, "occupies nothing, its container does not request it"},
}

func problemLabel(err error) string {
	for _, l := range problemLabels {
		if errors.Is(err, l.err) {
			return l.label
		}
	}
	if err == nil {
		return "invalid"
	}
	return strings.TrimPrefix(err.Error(), "reservation: ")
}

// describe turns a decode, validation or legacy error (possibly joined)
// into one line per problem, naming the entry and the field.
func describe(prefix string, err error) []string {
	var out []string
	for _, e := range flatten(err) {
		var de *reservation.DecodeError
		var ve *reservation.ValidationError
		var le *reservation.LegacyError
		var re *capability.RegistrationError
		switch {
		case errors.As(e, &de):
			where := "value"
			if de.Index >= 0 {
				where = "entry " + strconv.Itoa(de.Index)
			}
			if de.Field != "" {
				where += " field " + de.Field
			}
			out = append(out, fmt.Sprintf("%s%s: %s (byte %d)", prefix, where, de.Reason, de.Offset))
		case errors.As(e, &ve):
			where := "entry " + strconv.Itoa(ve.Index)
			if ve.Field != "" {
				where += " field " + ve.Field
			}
			msg := problemLabel(ve.Problem)
			if ve.Detail != "" {
				msg += ": " + ve.Detail
			}
			if ve.Other >= 0 {
				msg += fmt.Sprintf(" (entry %d)", ve.Other)
			}
			out = append(out, prefix+where+": "+msg)
		case errors.As(e, &le):
			out = append(out, fmt.Sprintf("%s%s container %d device %d: legacy identifier %q cannot be adopted (no physical placement, no runtime identity)",
				prefix, reservation.LegacyDevicesAnnotationKey, le.Device.ContainerIndex, le.Device.DeviceIndex, le.Device.ID))
		case errors.As(e, &re):
			out = append(out, prefix+re.Error())
		default:
			out = append(out, prefix+e.Error())
		}
	}
	return out
}

// flatten expands errors.Join trees into their leaves' direct children.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && isJoin(err) {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// isJoin tells errors.Join's result from typed errors that also unwrap to
// several errors (a ValidationError unwraps to its sentinels).
func isJoin(err error) bool {
	switch err.(type) {
	case *reservation.DecodeError, *reservation.ValidationError, *reservation.LegacyError,
		*reservation.PodError, *reservation.ConflictError, *capability.RegistrationError, *capability.ConfigError:
		return false
	}
	return true
}
