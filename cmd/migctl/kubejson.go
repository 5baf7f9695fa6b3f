package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/dynmig/dynmig/capability"
	"github.com/dynmig/dynmig/kube"
	"github.com/dynmig/dynmig/placement"
	"github.com/dynmig/dynmig/reservation"
	"github.com/dynmig/dynmig/schedule"
)

// header is what every Kubernetes object and list starts with.
type header struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion"`
	Items      []json.RawMessage `json:"items"`
}

// toJSON returns data as JSON: JSON input unchanged, anything else read as
// YAML (kubectl get -o yaml).
func toJSON(data []byte) ([]byte, error) {
	t := bytes.TrimSpace(data)
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return t, nil
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("neither JSON nor YAML: %w", err)
	}
	return j, nil
}

// objects splits Kubernetes JSON into its objects: a single object, or the
// items of a list (PodList, NodeList, List). Each object comes with its
// kind, with a list's item kind filled in from the list's kind.
func objects(data []byte) ([]json.RawMessage, []string, error) {
	j, err := toJSON(data)
	if err != nil {
		return nil, nil, err
	}
	if len(j) == 0 || j[0] != '{' {
		return nil, nil, fmt.Errorf("not a Kubernetes object: the input is %s, not a JSON or YAML object", jsonKind(j))
	}
	var h header
	if err := json.Unmarshal(j, &h); err != nil {
		return nil, nil, fmt.Errorf("not a Kubernetes object: %s", describeJSONError(err))
	}
	if h.Items == nil && !strings.HasSuffix(h.Kind, "List") {
		if h.Kind == "" {
			// A single allocation entry, say, or any other JSON object:
			// reading it as an empty Pod would report nothing wrong.
			return nil, nil, errors.New(`a JSON object without "kind" is not a Kubernetes object`)
		}
		return []json.RawMessage{j}, []string{h.Kind}, nil
	}
	kinds := make([]string, len(h.Items))
	for i, it := range h.Items {
		var ih header
		if err := json.Unmarshal(it, &ih); err != nil {
			return nil, nil, fmt.Errorf("items[%d]: not a Kubernetes object: %s", i, describeJSONError(err))
		}
		kinds[i] = ih.Kind
		if kinds[i] == "" {
			kinds[i] = strings.TrimSuffix(h.Kind, "List") // kubectl omits item kinds in typed lists
		}
	}
	return h.Items, kinds, nil
}

// jsonKind names the kind of JSON value j holds, for messages.
func jsonKind(j []byte) string {
	switch {
	case len(j) == 0:
		return "empty"
	case j[0] == '[':
		return "a list"
	case j[0] == '"':
		return "a string"
	case j[0] == 'n':
		return "null"
	default:
		return "a scalar"
	}
}

// describeJSONError says what is wrong with a JSON document without the Go
// type names encoding/json puts in its messages.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("field %q holds a JSON %s of the wrong type", te.Field, te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("a JSON %s where an object belongs", te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	}
	return err.Error()
}

// decodePods reads the pods of Kubernetes JSON: a Pod, a PodList, or the
// Pod items of a List (other kinds in a List are skipped).
func decodePods(data []byte) ([]*corev1.Pod, error) {
	objs, kinds, err := objects(data)
	if err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	for i, o := range objs {
		switch kinds[i] {
		case "Pod", "":
		default:
			if len(objs) == 1 {
				return nil, fmt.Errorf("kind %q: want Pod, PodList or List", kinds[i])
			}
			continue
		}
		p := new(corev1.Pod)
		if err := json.Unmarshal(o, p); err != nil {
			return nil, fmt.Errorf("%s: Pod: %s", itemName(len(objs), i), describeJSONError(err))
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// decodeNodes reads the nodes of Kubernetes JSON: a Node, a NodeList, or
// the Node items of a List.
func decodeNodes(data []byte) ([]*corev1.Node, error) {
	objs, kinds, err := objects(data)
	if err != nil {
		return nil, err
	}
	var nodes []*corev1.Node
	for i, o := range objs {
		if kinds[i] != "Node" {
			if len(objs) == 1 {
				return nil, fmt.Errorf("kind %q: want Node, NodeList or List", kinds[i])
			}
			continue
		}
		n := new(corev1.Node)
		if err := json.Unmarshal(o, n); err != nil {
			return nil, fmt.Errorf("%s: Node: %s", itemName(len(objs), i), describeJSONError(err))
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

func itemName(n, i int) string {
	if n == 1 {
		return "object"
	}
	return fmt.Sprintf("items[%d]", i)
}

// nodeView is one node as the scheduler sees it: the registration, the
// MIG GPUs decoded from it, and the pods on it.
type nodeView struct {
	name string
	devs []capability.NodeDevice // the registration's usable devices
	gpus []capability.GPU        // the devices in MIG mode, by index
	// rejected are the registration entries left out, as the scheduler
	// leaves them out; findings what it kept but noticed.
	rejected []*capability.RegistrationError
	findings []capability.RegistrationFinding
	pods     []*corev1.Pod // pods bound to the node or reserving its GPUs
	// pending are MIG pods without a reservation that are not bound to
	// another node: candidates the scheduler still has to place.
	pending []*corev1.Pod
}

// loadNode reads --node (a Node, NodeList or List, or a bare registration
// value) and --pods, keeping the pods that belong to the node.
func loadNode(e *env, nodeFile, nodeName, podsFile string) (*nodeView, error) {
	if nodeFile == "" {
		return nil, usageErr("--node is required")
	}
	data, err := e.readInput(nodeFile)
	if err != nil {
		return nil, err
	}
	nv := &nodeView{name: nodeName}
	var value []byte
	where := displayName(nodeFile)
	if j, err := toJSON(data); err == nil && len(j) > 0 && j[0] == '[' {
		// A bare hami.io/node-nvidia-register value.
		if nv.name == "" {
			nv.name = "node"
		}
		value = j
	} else {
		node, err := pickNode(data, nodeName)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", displayName(nodeFile), err)
		}
		nv.name = node.Name
		v, ok := node.Annotations[capability.NodeRegisterAnnotation]
		if !ok {
			return nil, fmt.Errorf("%s: node %s has no %s annotation: no device plugin has registered its GPUs (is dynmig's device plugin running there?)",
				displayName(nodeFile), node.Name, capability.NodeRegisterAnnotation)
		}
		value = []byte(v)
		where = fmt.Sprintf("%s: node %s: %s", displayName(nodeFile), node.Name, capability.NodeRegisterAnnotation)
	}
	// Read as the scheduler reads it: a malformed entry takes out that
	// GPU only, and the commands report it.
	reg, err := capability.ReadNodeRegistration(value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	nv.devs, nv.gpus, nv.rejected, nv.findings = reg.Devices, reg.GPUs(), reg.Rejected, reg.Findings
	if err := nv.requireMIG(where); err != nil {
		return nil, err
	}
	if podsFile == "" {
		return nv, nil
	}
	if podsFile == nodeFile && podsFile == "-" {
		return nil, usageErr("--node and --pods cannot both read standard input")
	}
	pdata, err := e.readInput(podsFile)
	if err != nil {
		return nil, err
	}
	pods, err := decodePods(pdata)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", displayName(podsFile), err)
	}
	for _, p := range pods {
		switch {
		case nv.holds(p):
			nv.pods = append(nv.pods, p)
		case p.Spec.NodeName == "" && kube.WantsMIG(p) && !kube.Terminal(p) &&
			p.Annotations[reservation.AnnotationKey] == "":
			nv.pending = append(nv.pending, p)
		}
	}
	return nv, nil
}

// requireMIG fails when the node has no MIG GPU to schedule on, saying
// what is missing: every command that reads a node needs one.
func (nv *nodeView) requireMIG(where string) error {
	if len(nv.gpus) > 0 {
		return nil
	}
	if len(nv.rejected) > 0 {
		errs := make([]error, len(nv.rejected))
		for i, re := range nv.rejected {
			errs[i] = re
		}
		return fmt.Errorf("%s: node %s has no usable MIG GPU: every MIG entry of its registration was refused: %w", where, nv.name, errors.Join(errs...))
	}
	if len(nv.devs) == 0 {
		return fmt.Errorf("%s: node %s registers no GPUs", where, nv.name)
	}
	modes := make([]string, 0, len(nv.devs))
	for _, d := range nv.devs {
		m := d.Mode
		if m == "" {
			m = "none"
		}
		if !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	return fmt.Errorf("%s: node %s registers %s, none in MIG mode (mode %s): enable MIG mode on its GPUs and restart the device plugin",
		where, nv.name, plural(len(nv.devs), "GPU", "GPUs"), strings.Join(modes, ", "))
}

// registrationNotes describes the registration entries left out
// (problems) and what was kept but noticed (notes), one line each.
func (nv *nodeView) registrationNotes() (problems, notes []string) {
	for _, re := range nv.rejected {
		problems = append(problems, fmt.Sprintf("node %s: registration entry %d left out, its GPU gets no MIG pods: %v", nv.name, re.Device, re))
	}
	for _, f := range nv.findings {
		notes = append(notes, fmt.Sprintf("node %s: registration %s", nv.name, f))
	}
	return problems, notes
}

// warnRegistration prints registrationNotes to standard error.
func (nv *nodeView) warnRegistration(e *env) {
	problems, notes := nv.registrationNotes()
	for _, l := range append(problems, notes...) {
		fmt.Fprintf(e.stderr, "warning: %s\n", l)
	}
}

// pickNode returns the node named name, or the only node.
func pickNode(data []byte, name string) (*corev1.Node, error) {
	nodes, err := decodeNodes(data)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range nodes {
		if name == "" && len(nodes) == 1 || n.Name == name {
			return n, nil
		}
		names = append(names, n.Name)
	}
	if len(nodes) == 0 {
		return nil, errors.New("no Node in the input")
	}
	if name == "" {
		return nil, usageErr("%d nodes in the input (%s): choose one with --node-name", len(nodes), strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("no node %q in the input (have %s)", name, strings.Join(names, ", "))
}

// holds reports whether a pod belongs to the node: bound to it, or not yet
// bound but reserving one of its GPUs (assumed by the scheduler) with an
// entry the trust rule keeps.
func (nv *nodeView) holds(p *corev1.Pod) bool {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName == nv.name
	}
	allocs, err := reservation.DecodeString(p.Annotations[reservation.AnnotationKey])
	if err != nil {
		return false
	}
	allocs, _ = kube.TrustedEntries(allocs, podView(p).DeviceRequests)
	for _, a := range allocs {
		if slices.ContainsFunc(nv.gpus, func(g capability.GPU) bool { return g.UUID == a.GPUUUID }) {
			return true
		}
	}
	return false
}

// podView converts a pod, naming pods without a UID (hand-written files)
// by namespace/name so that every pod has an identity.
func podView(p *corev1.Pod) reservation.Pod {
	v := kube.PodView(p)
	if v.UID == "" {
		v.UID = v.Namespace + "/" + v.Name
	}
	return v
}

func podKey(v reservation.Pod) string {
	if v.Namespace == "" {
		return v.Name
	}
	return v.Namespace + "/" + v.Name
}

// snapshot is the complete listing of the node's pods.
func (nv *nodeView) snapshot() reservation.Snapshot {
	s := reservation.Snapshot{Complete: true}
	for _, p := range nv.pods {
		s.Pods = append(s.Pods, podView(p))
	}
	return s
}

// ledger builds the scheduler's occupancy of the node from its active pods,
// leaving out the pod named skip (the one being placed). Problems with
// observed reservations are returned as warnings: the scheduler records
// them anyway, as the slots are taken in reality. Entries the trust rule
// drops (kube.TrustedEntries: their container does not request them)
// occupy nothing, as in the scheduler, and are warned about.
func (nv *nodeView) ledger(pol placement.Policy, skip string) (*placement.Ledger, []string, error) {
	l := placement.NewLedger(placement.LedgerOptions{Policy: pol})
	if err := l.SetNode(nv.name, nv.gpus); err != nil {
		return nil, nil, fmt.Errorf("node %s: %w", nv.name, err)
	}
	var warnings []string
	for _, p := range nv.pods {
		v := podView(p)
		if !v.Active() || podKey(v) == skip {
			continue
		}
		value, ok := v.Annotations[reservation.AnnotationKey]
		if !ok {
			continue
		}
		allocs, err := reservation.DecodeString(value)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("pod %s: %s not counted: %v", podKey(v), reservation.AnnotationKey, err))
			continue
		}
		allocs, untrusted := kube.TrustedEntries(allocs, v.DeviceRequests)
		warnings = append(warnings, untrustedProblems(v, untrusted)...)
		// Overlaps between pods are recorded and listed by Conflicts;
		// the callers report them with pod names.
		for _, err := range flatten(l.AddPod(nv.name, v.UID, schedule.LedgerReservations(v.UID, allocs))) {
			if err != nil && !errors.Is(err, placement.ErrConflict) {
				warnings = append(warnings, fmt.Sprintf("pod %s: %v", podKey(v), err))
			}
		}
	}
	return l, warnings, nil
}

// podName returns the namespace/name of the node's pod with that UID.
func (nv *nodeView) podName(uid string) string {
	for _, p := range nv.pods {
		if v := podView(p); v.UID == uid {
			return podKey(v)
		}
	}
	return uid
}

// untrustedProblems describes the entries of v's record that the trust
// rule drops (err from kube.TrustedEntries; nil: none): each occupies
// nothing.
func untrustedProblems(v reservation.Pod, err error) []string {
	if err == nil {
		return nil
	}
	return describe("pod "+podKey(v)+": ", err)
}
