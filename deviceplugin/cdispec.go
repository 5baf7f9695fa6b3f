package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/dynmig/dynmig/internal/leaf/atomicfile"
	"github.com/dynmig/dynmig/internal/leaf/devnodes"
	"github.com/dynmig/dynmig/internal/leaf/migcdi"
	"github.com/dynmig/dynmig/realize"
)

// DefaultCDIDir is the directory container runtimes read CDI specs from,
// where the plugin writes its own when Config.CDIDir is "".
const DefaultCDIDir = "/var/run/cdi"

// ErrNoCDIGenerator: a CDI device list strategy was chosen without a
// Config.CDIGenerator to describe the instances.
var ErrNoCDIGenerator = errors.New("deviceplugin: a CDI device list strategy needs Config.CDIGenerator")

// ErrCDISpec: a MIG instance's CDI spec could not be generated, written or
// removed; a [*CDISpecError] says which.
var ErrCDISpec = errors.New("deviceplugin: CDI spec")

// CDISpecError names the instance and file [ErrCDISpec] is about.
type CDISpecError struct {
	MIGUUID string // the instance; "" for the directory as a whole
	Path    string
	Err     error
}

func (e *CDISpecError) Error() string {
	if e.MIGUUID == "" {
		return fmt.Sprintf("deviceplugin: CDI spec directory %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("deviceplugin: CDI spec of %s (%s): %v", e.MIGUUID, e.Path, e.Err)
}

// Unwrap returns [ErrCDISpec] and the cause.
func (e *CDISpecError) Unwrap() []error { return []error{ErrCDISpec, e.Err} }

// CDIInstance is the MIG instance one CDI spec describes (package
// internal/leaf/migcdi, shared with the DRA driver and package
// nvmlhal/nvcdigen).
type CDIInstance = migcdi.Instance

// CDIGenerator describes MIG instances as CDI container edits. [NodeCDI]
// injects device nodes only; package nvmlhal/nvcdigen (cgo) generates
// them with NVIDIA's container toolkit library (device nodes, the driver's
// libraries and the toolkit's hooks). Its methods may be called
// concurrently.
type CDIGenerator interface {
	// DeviceEdits returns the edits that give a container the instance:
	// at least its device nodes.
	DeviceEdits(CDIInstance) (cdispec.ContainerEdits, error)
	// CommonEdits returns the edits every container using a MIG device
	// needs (control nodes; for a full generator, the driver's libraries
	// and the toolkit's hooks).
	CommonEdits() (cdispec.ContainerEdits, error)
}

// NodeCDI is a minimal [CDIGenerator], as the DRA driver's specs: each
// instance's edits inject its parent GPU's node and its GPU and compute
// instances' capability nodes and set NVIDIA_VISIBLE_DEVICES to its MIG
// UUID, the common edits /dev/nvidiactl (and nvidia-uvm's nodes). The
// driver's libraries are left to a toolkit in legacy mode, which acts on
// the variable.
type NodeCDI struct {
	nodes nodeSource
}

// nodeSource is where [NodeCDI] finds device nodes.
type nodeSource interface {
	migNodes(CDIInstance) ([]devnodes.Node, error)
	controlNodes() ([]devnodes.Node, error)
}

// NewProcCDI returns a [NodeCDI] reading device nodes from the NVIDIA
// kernel driver's /proc files under root ("" is "/"), as the DRA driver's
// ProcNodes does.
func NewProcCDI(root string) *NodeCDI { return &NodeCDI{nodes: procNodes{devnodes.Proc{Root: root}}} }

// NewFakeCDI returns a [NodeCDI] for fakehal, whose GPUs have no /proc
// files: nodes numbered from the GPU index and instance IDs (package
// internal/leaf/devnodes, Fake).
func NewFakeCDI() *NodeCDI { return &NodeCDI{nodes: fakeNodes{}} }

// DeviceEdits implements [CDIGenerator].
func (g *NodeCDI) DeviceEdits(in CDIInstance) (cdispec.ContainerEdits, error) {
	nodes, err := g.nodes.migNodes(in)
	if err != nil {
		return cdispec.ContainerEdits{}, err
	}
	return cdispec.ContainerEdits{Env: []string{VisibleDevicesEnv + "=" + in.MIGUUID}, DeviceNodes: cdiNodes(nodes)}, nil
}

// CommonEdits implements [CDIGenerator].
func (g *NodeCDI) CommonEdits() (cdispec.ContainerEdits, error) {
	nodes, err := g.nodes.controlNodes()
	if err != nil {
		return cdispec.ContainerEdits{}, err
	}
	return cdispec.ContainerEdits{DeviceNodes: cdiNodes(nodes)}, nil
}

type procNodes struct{ p devnodes.Proc }

func (s procNodes) migNodes(in CDIInstance) ([]devnodes.Node, error) {
	return s.p.MIGNodes(in.GPUUUID, in.GPUInstanceID, in.ComputeInstanceID)
}
func (s procNodes) controlNodes() ([]devnodes.Node, error) { return s.p.ControlNodes() }

type fakeNodes struct{}

func (fakeNodes) migNodes(in CDIInstance) ([]devnodes.Node, error) {
	return devnodes.Fake{}.MIGNodes(in.GPU, in.GPUInstanceID, in.ComputeInstanceID), nil
}
func (fakeNodes) controlNodes() ([]devnodes.Node, error) { return devnodes.Fake{}.ControlNodes(), nil }

func cdiNodes(nodes []devnodes.Node) []*cdispec.DeviceNode {
	out := make([]*cdispec.DeviceNode, 0, len(nodes))
	for _, n := range nodes {
		cn := &cdispec.DeviceNode{Path: n.Path, Type: "c", Major: n.Major, Minor: n.Minor}
		if n.FileMode != 0 {
			mode := n.FileMode
			cn.FileMode = &mode
		}
		out = append(out, cn)
	}
	return out
}

// cdiSpecs keeps one CDI spec file per managed MIG instance in a
// directory; see the package documentation, "CDI specs".
type cdiSpecs struct {
	dir string
	gen CDIGenerator
	log *slog.Logger
	// mu orders a write after an instance's creation against a
	// reconciliation that read the managed instances before it: without
	// it, the reconciliation could remove the new spec.
	mu sync.Mutex
}

// specPrefix starts the name of every spec file the plugin owns.
var specPrefix = cdi.GenerateSpecName(CDIVendor, CDIClass) + "_"

// specPath is the file of the instance's spec.
func (s *cdiSpecs) specPath(migUUID string) string {
	return filepath.Join(s.dir, cdi.GenerateTransientSpecName(CDIVendor, CDIClass, migUUID)+".json")
}

// spec returns the instance's CDI spec.
func (s *cdiSpecs) spec(in CDIInstance) (*cdispec.Spec, error) {
	if err := parser.ValidateDeviceName(in.MIGUUID); err != nil {
		return nil, err
	}
	dev, err := s.gen.DeviceEdits(in)
	if err != nil {
		return nil, err
	}
	common, err := s.gen.CommonEdits()
	if err != nil {
		return nil, err
	}
	spec := &cdispec.Spec{Kind: CDIKind, Devices: []cdispec.Device{{Name: in.MIGUUID, ContainerEdits: dev}}, ContainerEdits: common}
	if spec.Version, err = cdispec.MinimumRequiredVersion(spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// write writes the specs of ins atomically (package internal/leaf/atomicfile),
// each readable by the container runtime.
func (s *cdiSpecs) write(ins ...CDIInstance) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(ins)
}

func (s *cdiSpecs) writeLocked(ins []CDIInstance) error {
	for _, in := range ins {
		path := s.specPath(in.MIGUUID)
		spec, err := s.spec(in)
		if err == nil {
			var data []byte
			if data, err = json.Marshal(spec); err == nil {
				err = atomicfile.Write(path, data, 0o644)
			}
		}
		if err != nil {
			return &CDISpecError{MIGUUID: in.MIGUUID, Path: path, Err: err}
		}
	}
	return nil
}

// reconcile makes the directory hold exactly the specs of the instances
// managed returns: it writes the missing ones and removes those of
// instances no longer managed. Files of other vendors are left alone.
func (s *cdiSpecs) reconcile(ctx context.Context, managed func() []realize.ManagedInstance) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	have, err := s.list()
	if err != nil {
		return err
	}
	var missing []CDIInstance
	for _, m := range managed() {
		in := cdiInstance(m)
		if in.MIGUUID == "" {
			continue
		}
		if !have[in.MIGUUID] {
			missing = append(missing, in)
		}
		delete(have, in.MIGUUID)
	}
	var errs []error
	for u := range have {
		path := s.specPath(u)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, &CDISpecError{MIGUUID: u, Path: path, Err: err})
			continue
		}
		s.log.InfoContext(ctx, "removed the CDI spec of an instance no longer managed", "mig", u, "path", path)
	}
	if err := s.writeLocked(missing); err != nil {
		errs = append(errs, err)
	}
	for _, in := range missing {
		s.log.InfoContext(ctx, "wrote the missing CDI spec of a managed instance", "mig", in.MIGUUID)
	}
	return errors.Join(errs...)
}

// list returns the MIG UUIDs whose spec files the directory holds,
// creating the directory when missing.
func (s *cdiSpecs) list() (map[string]bool, error) {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, &CDISpecError{Path: s.dir, Err: err}
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, &CDISpecError{Path: s.dir, Err: err}
	}
	out := map[string]bool{}
	for _, e := range entries {
		u, ok := strings.CutPrefix(e.Name(), specPrefix)
		if u, isJSON := strings.CutSuffix(u, ".json"); ok && isJSON && e.Type().IsRegular() {
			out[u] = true
		}
	}
	return out, nil
}

// cdiInstance is the spec's view of a managed instance.
func cdiInstance(m realize.ManagedInstance) CDIInstance {
	return CDIInstance{
		GPU: m.Key.GPU, GPUUUID: m.GPUUUID, MIGUUID: m.Runtime.MIGUUID,
		GPUInstanceID: m.Runtime.GPUInstanceID, ComputeInstanceID: m.Runtime.ComputeInstanceID,
	}
}

// writeSpecs writes the CDI specs of an Allocate's devices, before the
// kubelet is given their names; nothing without a CDI strategy.
func (p *Plugin) writeSpecs(devs []realize.Device) error {
	if p.cdi == nil {
		return nil
	}
	ins := make([]CDIInstance, len(devs))
	for i, d := range devs {
		ins[i] = CDIInstance{
			GPU: d.Key.GPU, GPUUUID: d.Entry.GPUUUID, MIGUUID: d.Runtime.MIGUUID,
			GPUInstanceID: d.Runtime.GPUInstanceID, ComputeInstanceID: d.Runtime.ComputeInstanceID,
		}
	}
	return p.cdi.write(ins...)
}

// syncSpecs reconciles the CDI specs with the managed instances after a
// maintenance pass; nothing without a CDI strategy.
func (p *Plugin) syncSpecs(ctx context.Context) error {
	if p.cdi == nil {
		return nil
	}
	return p.cdi.reconcile(ctx, p.manager.Managed)
}
